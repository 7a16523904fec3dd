"""Self-signed certificates for TLS tests and benchmarks (openssl CLI), written into a temporary directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def make_cert(directory: Path, name: str, san: str = "IP:127.0.0.1", cn: str | None = None) -> tuple[Path, Path]:
    """A self-signed P-256 certificate for `san` (an openssl subjectAltName) with its own key, written as
    `<name>.crt` / `<name>.key` (created directory included): (cert, key). The subject's CN is `cn` or `name`."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", f"/CN={cn or name}", "-addext", f"subjectAltName={san}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key
