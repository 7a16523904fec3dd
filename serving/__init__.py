"""What both programs' HTTP servers share: bounded requests, TLS from reloaded files, Kubernetes-style
authentication and authorization of scrapes, and a uvicorn server that leaves signals to the program."""
