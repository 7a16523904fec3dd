"""The webhook's metrics, on the controller's registry (served at /metrics on the controller's HTTP port)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from controller.admission.review import OUTCOMES, Decision

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class AdmissionMetrics:
    """Reviews by outcome (every pod left unchanged is counted under its reason) and answer latency."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reviews = Counter(
            "colo_controller_admission_reviews_total",
            "AdmissionReviews answered, by outcome (patched, unchanged, no_match, excluded_namespace, "
            "system_priority, ignored, error) and whether the request was a dry run.",
            ["outcome", "dry_run"],
            registry=registry,
        )
        self.patched = Counter(
            "colo_controller_admission_patched_total",
            "Pods changed by the webhook, by colocation profile (dry runs not included).",
            ["profile"],
            registry=registry,
        )
        self.bad_requests = Counter(
            "colo_controller_admission_bad_requests_total",
            "Requests that were not an AdmissionReview with a request uid (answered 400).",
            registry=registry,
        )
        self.latency = Histogram(
            "colo_controller_admission_review_duration_seconds",
            "Time to decide one AdmissionReview.",
            registry=registry,
            buckets=_LATENCY_BUCKETS,
        )
        for outcome in OUTCOMES:  # every series exists from the start, so rate() sees the first one
            for dry_run in ("false", "true"):
                self.reviews.labels(outcome, dry_run)

    def record(self, decision: Decision, seconds: float) -> None:
        self.reviews.labels(decision.outcome, "true" if decision.dry_run else "false").inc()
        if decision.outcome == "patched" and decision.profile is not None and not decision.dry_run:
            self.patched.labels(decision.profile).inc()
        self.latency.observe(seconds)
