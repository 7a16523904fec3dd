/* The interference benchmark's processes (bench/interference.py compiles this with gcc at bench time).
 *
 * C, not Python: the service's own noise (an interpreter's allocator, its GIL, its garbage collector) would sit
 * in the very tail the benchmark measures, and the load generator must send on time at 1,200 requests a second.
 *
 *   server PORT THREADS ITERS [ADDR]
 *                               UDP echo on ADDR:PORT (default 127.0.0.1; 0.0.0.0 in a pod's own network, which
 *                               bench/realnode_interference.py uses); each request does ITERS rounds of fixed work.
 *                               It also serves its own latency (from each request's arrival, timestamped by the
 *                               kernel, to its reply) as a Prometheus histogram on TCP ADDR:PORT, any path:
 *                               colo_bench_request_duration_seconds, what a service that declares an SLO exports
 *   calibrate MICROS            prints the ITERS that take MICROS on this CPU (the minimum of many trials)
 *   loadgen PORT RATE SECONDS SEED OUT SKIP [START [ADDR]]
 *                               open-loop Poisson sender to ADDR:PORT (default 127.0.0.1); writes one int64 per
 *                               request scheduled after the first SKIP seconds to OUT: reply time minus the
 *                               request's *scheduled* send time (ns), -1 when no reply came; the schedule starts
 *                               at START (CLOCK_REALTIME ns) if given and not 0
 *   burn THREADS                busy threads until SIGTERM; prints the loop rounds done
 *   stream MIB                  reads and writes a MIB buffer over and over until SIGTERM; prints bytes streamed
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define TABLE_WORDS (1u << 17) /* 1 MiB, read-only: the service's working set, in L2 when nothing evicts it */

static uint64_t *table;
static volatile sig_atomic_t stopping;

static void on_term(int sig) { (void)sig; stopping = 1; }

static int64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fill_table(void) {
    table = malloc(TABLE_WORDS * sizeof(uint64_t));
    uint64_t x = 88172645463325252ULL;
    for (uint32_t i = 0; i < TABLE_WORDS; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        table[i] = x;
    }
}

/* Fixed work: a chain of dependent table lookups (a hash join's probe), the same instructions every time. */
static uint64_t work(uint64_t seed, long iters) {
    uint64_t x = seed | 1;
    for (long i = 0; i < iters; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        x += table[x & (TABLE_WORDS - 1)];
    }
    return x;
}

/* The kernel's receive timestamp of a message read with SO_TIMESTAMPNS on (CLOCK_REALTIME ns), -1 if none. */
static int64_t kernel_time(struct msghdr *m) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        }
    return -1;
}

struct server_arg { int fd; long iters; };

/* The service's own latency histogram: upper bounds in seconds (the last is +Inf), cumulative at exposition. */
static const double bounds[] = {0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.010, 0.0125,
                                0.015, 0.020, 0.025, 0.030, 0.040, 0.050, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5};
#define NBOUNDS (sizeof bounds / sizeof bounds[0])
static uint64_t hist[NBOUNDS + 1], hist_sum_ns;

static void observe(int64_t ns) {
    size_t i = 0;
    while (i < NBOUNDS && (double)ns > bounds[i] * 1e9) i++;
    __atomic_fetch_add(&hist[i], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&hist_sum_ns, (uint64_t)(ns > 0 ? ns : 0), __ATOMIC_RELAXED);
}

static void *serve(void *p) {
    struct server_arg *a = p;
    char buf[64], ctl[256];
    struct sockaddr_in peer;
    for (;;) {
        struct iovec iov = {buf, sizeof buf};
        struct msghdr m = {.msg_name = &peer, .msg_namelen = sizeof peer, .msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = ctl, .msg_controllen = sizeof ctl};
        ssize_t n = recvmsg(a->fd, &m, 0);
        if (n < 16) continue;
        int64_t arrived = kernel_time(&m);
        uint64_t seq;
        memcpy(&seq, buf, 8);
        uint64_t r = work(seq, a->iters);
        memcpy(buf + 8, &r, sizeof r);
        sendto(a->fd, buf, (size_t)n, 0, (struct sockaddr *)&peer, m.msg_namelen);
        if (arrived >= 0) observe(now_ns(CLOCK_REALTIME) - arrived);
    }
    return NULL;
}

/* The histogram in Prometheus' text format to every TCP connection (the request itself is not parsed). */
static void *expose(void *p) {
    int lfd = *(int *)p;
    static char body[4096], out[4608], req[1024];
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0) continue;
        struct timeval tv = {1, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        (void)!read(c, req, sizeof req);
        int len = snprintf(body, sizeof body, "# TYPE colo_bench_request_duration_seconds histogram\n");
        uint64_t cum = 0;
        for (size_t i = 0; i <= NBOUNDS; i++) {
            cum += __atomic_load_n(&hist[i], __ATOMIC_RELAXED);
            if (i < NBOUNDS)
                len += snprintf(body + len, sizeof body - (size_t)len,
                                "colo_bench_request_duration_seconds_bucket{le=\"%g\"} %llu\n", bounds[i],
                                (unsigned long long)cum);
            else
                len += snprintf(body + len, sizeof body - (size_t)len,
                                "colo_bench_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
                                "colo_bench_request_duration_seconds_sum %.9f\n"
                                "colo_bench_request_duration_seconds_count %llu\n",
                                (unsigned long long)cum, (double)__atomic_load_n(&hist_sum_ns, __ATOMIC_RELAXED) / 1e9,
                                (unsigned long long)cum);
        }
        int n = snprintf(out, sizeof out,
                         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n"
                         "Connection: close\r\n\r\n%s",
                         len, body);
        (void)!write(c, out, (size_t)n);
        close(c);
    }
    return NULL;
}

/* ADDR (dotted quad) into `addr`, 127.0.0.1 when absent; 0 when it is no IPv4 address. */
static int parse_addr(const char *text, struct in_addr *addr) {
    if (!text) { addr->s_addr = htonl(INADDR_LOOPBACK); return 1; }
    return inet_pton(AF_INET, text, addr) == 1;
}

static int server(int port, int threads, long iters, const char *where) {
    fill_table();
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (!parse_addr(where, &addr.sin_addr)) { fprintf(stderr, "server: bad address %s\n", where); return 2; }
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) { perror("bind"); return 1; }
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 16) != 0) {
        perror("bind (metrics)");
        return 1;
    }
    pthread_t metrics;
    pthread_create(&metrics, NULL, expose, &lfd);
    work(1, 1000); /* fault the table in */
    printf("ready\n");
    fflush(stdout);
    pthread_t t[64];
    struct server_arg a = {fd, iters};
    for (int i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, serve, &a);
    pthread_join(t[0], NULL);
    return 0;
}

static int calibrate(double micros) {
    fill_table();
    const long probe = 100000;
    int64_t best = INT64_MAX;
    volatile uint64_t sink = 0;
    for (int i = 0; i < 60; i++) {
        int64_t t0 = now_ns(CLOCK_MONOTONIC);
        sink += work((uint64_t)i, probe);
        int64_t d = now_ns(CLOCK_MONOTONIC) - t0;
        if (d < best) best = d;
    }
    printf("%ld\n", (long)(probe * micros * 1000.0 / (double)best));
    return 0;
}

struct gen {
    int fd;
    long n;
    int64_t *sched;   /* CLOCK_REALTIME ns: what the replies' kernel timestamps are in */
    int64_t *lat;
    volatile int sending;
};

static void *receiver(void *p) {
    struct gen *g = p;
    char buf[64], ctl[256];
    for (;;) {
        struct iovec iov = {buf, sizeof buf};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
        ssize_t n = recvmsg(g->fd, &m, 0);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) { if (!g->sending) break; continue; }
            continue;
        }
        if (n < 16) continue;
        int64_t at = kernel_time(&m);
        if (at < 0) at = now_ns(CLOCK_REALTIME);
        uint64_t seq;
        memcpy(&seq, buf, 8);
        if (seq < (uint64_t)g->n) g->lat[seq] = at - g->sched[seq];
    }
    return NULL;
}

static int loadgen(int port, double rate, double seconds, unsigned seed, const char *out, double skip,
                   int64_t at, const char *where) {
    /* the generator stands for clients on other machines: real-time priority keeps its own delays out of
       the figures (its work is microseconds per request) */
    struct sched_param sp = {.sched_priority = 10};
    sched_setscheduler(0, SCHED_FIFO, &sp);
    struct gen g = {0};
    g.fd = socket(AF_INET, SOCK_DGRAM, 0);
    int on = 1, big = 4 << 20;
    setsockopt(g.fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    setsockopt(g.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    struct timeval tv = {0, 200000};
    setsockopt(g.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (!parse_addr(where, &addr.sin_addr)) { fprintf(stderr, "loadgen: bad address %s\n", where); return 2; }
    connect(g.fd, (struct sockaddr *)&addr, sizeof addr);
    long cap = (long)(rate * seconds * 1.5) + 1000;
    g.sched = malloc(cap * sizeof(int64_t));
    g.lat = malloc(cap * sizeof(int64_t));
    srand48(seed);
    int64_t now = now_ns(CLOCK_REALTIME), start = at > now ? at : now + 1000000;
    int64_t t = start, end = start + (int64_t)(seconds * 1e9);
    long n = 0;
    while (n < cap) {
        t += (int64_t)(-log1p(-drand48()) / rate * 1e9); /* exponential gaps: Poisson arrivals */
        if (t >= end) break;
        g.sched[n] = t;
        g.lat[n] = -1;
        n++;
    }
    g.n = n;
    g.sending = 1;
    pthread_t r;
    pthread_create(&r, NULL, receiver, &g);
    char buf[32] = {0};
    for (long i = 0; i < n; i++) {
        struct timespec ts = {g.sched[i] / 1000000000LL, g.sched[i] % 1000000000LL};
        while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
        uint64_t seq = (uint64_t)i;
        memcpy(buf, &seq, 8);
        send(g.fd, buf, sizeof buf, 0); /* late or not: sent now, measured from its scheduled time */
    }
    struct timespec grace = {1, 0};
    nanosleep(&grace, NULL);
    g.sending = 0;
    pthread_join(r, NULL);
    FILE *f = fopen(out, "wb");
    if (!f) { perror(out); return 1; }
    long first = 0;
    while (first < n && g.sched[first] < start + (int64_t)(skip * 1e9)) first++;
    fwrite(g.lat + first, sizeof(int64_t), (size_t)(n - first), f);
    fclose(f);
    printf("%ld\n", n - first);
    return 0;
}

static volatile uint64_t *burn_counts;

static void *burner(void *p) {
    long i = (long)p;
    uint64_t c = 0;
    while (!stopping) {
        for (int k = 0; k < 1000; k++) __asm__ volatile("" ::: "memory");
        c++;
        if ((c & 1023) == 0) burn_counts[i * 8] = c;
    }
    burn_counts[i * 8] = c;
    return NULL;
}

static int burn(int threads) {
    burn_counts = calloc((size_t)threads * 8, sizeof(uint64_t));
    pthread_t t[64];
    for (long i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, burner, (void *)i);
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) total += burn_counts[i * 8];
    printf("%llu\n", (unsigned long long)total * 1000);
    return 0;
}

static int stream(long mib) {
    size_t words = (size_t)mib << 17;
    uint64_t *buf = malloc(words * sizeof(uint64_t));
    for (size_t i = 0; i < words; i++) buf[i] = i;
    printf("ready\n");
    fflush(stdout);
    uint64_t bytes = 0, sum = 0;
    while (!stopping) {
        for (size_t i = 0; i < words && !stopping; i += 8) { /* one cache line read and written per step */
            sum += buf[i];
            buf[i] = sum;
            bytes += 64;
        }
    }
    printf("%llu\n", (unsigned long long)bytes);
    return (int)(sum & 0);
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "burn") || !strcmp(argv[1], "stream"))) {
        signal(SIGTERM, on_term); /* the antagonists stop, then print what they did */
        signal(SIGINT, on_term);
    }
    if (argc >= 5 && !strcmp(argv[1], "server"))
        return server(atoi(argv[2]), atoi(argv[3]), atol(argv[4]), argc >= 6 ? argv[5] : NULL);
    if (argc >= 3 && !strcmp(argv[1], "calibrate")) return calibrate(atof(argv[2]));
    if (argc >= 8 && !strcmp(argv[1], "loadgen"))
        return loadgen(atoi(argv[2]), atof(argv[3]), atof(argv[4]), (unsigned)atoi(argv[5]), argv[6], atof(argv[7]),
                       argc >= 9 ? atoll(argv[8]) : 0, argc >= 10 ? argv[9] : NULL);
    if (argc >= 3 && !strcmp(argv[1], "burn")) return burn(atoi(argv[2]));
    if (argc >= 3 && !strcmp(argv[1], "stream")) return stream(atol(argv[2]));
    fprintf(stderr, "usage: see the comment at the top of interference.c\n");
    return 2;
}
