"""A real MQTT broker for the tests (Debian's ``mosquitto`` on 127.0.0.1, a free port) and a real
subscriber (aiomqtt) that collects what it hears."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt

from scripts.rtsp_camera import free_port  # scripts/: one free loopback port

INSTALL = "Mosquitto is not installed: run scripts/test.sh (it installs it), or apt-get install mosquitto"


class Mosquitto:
    """``mosquitto -c CONF`` on 127.0.0.1:``port``; stop and start it again on the same port.

    Sessions and retained messages persist across a stop (saved at SIGTERM), and QoS 0 messages
    are queued for a subscriber with a persistent session while it is away: a test can count
    every message that reached the broker even across an outage."""

    def __init__(self, folder: Path, *, users: dict[str, str] | None = None) -> None:
        if shutil.which("mosquitto") is None:
            raise RuntimeError(INSTALL)
        self.folder = folder
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        lines = [
            f"listener {self.port} 127.0.0.1",
            "persistence true",
            f"persistence_location {folder}/",
            "queue_qos0_messages true",
            "max_queued_messages 10000",
            f"user {getpass.getuser()}",  # run as root, it would drop to the user 'mosquitto'
        ]
        if users:
            passwords = folder / "passwords"
            for name, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", *(["-c"] if not passwords.exists() else []),
                                str(passwords), name, password], check=True, capture_output=True)  # fmt: skip
            lines += ["allow_anonymous false", f"password_file {passwords}"]
        else:
            lines.append("allow_anonymous true")
        self.conf = folder / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")
        self.log = folder / "mosquitto.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(["mosquitto", "-c", str(self.conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@dataclass
class Heard:
    topic: str
    payload: bytes
    retain: bool
    qos: int
    t: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        return json.loads(self.payload)


class Subscriber:
    """A real client subscribed to ``topics`` (QoS 1), collecting messages in ``heard``.

    ``persistent``: a session the broker keeps while the client is away (and across a broker
    restart), so nothing published meanwhile is missed; the client reconnects by itself."""

    def __init__(self, port: int, topics: tuple[str, ...] = ("edgepipe/#", "homeassistant/#"), *,
                 persistent: bool = False, username: str | None = None, password: str | None = None) -> None:  # fmt: skip
        self.port = port
        self.topics = topics
        self.persistent = persistent
        self.username, self.password = username, password
        self.heard: list[Heard] = []
        self.connected = asyncio.Event()
        self.identifier = f"test-subscriber-{free_port()}"

    async def run(self) -> None:
        while True:
            try:
                async with aiomqtt.Client("127.0.0.1", self.port, identifier=self.identifier,
                                          clean_session=not self.persistent, username=self.username,
                                          password=self.password) as client:  # fmt: skip
                    for topic in self.topics:
                        await client.subscribe(topic, qos=1)
                    self.connected.set()
                    async for message in client.messages:
                        self._hear(message)
            except aiomqtt.MqttError:
                self.connected.clear()
                await asyncio.sleep(0.1)

    def _hear(self, message: aiomqtt.Message) -> None:
        raw = message.payload
        payload = raw if isinstance(raw, bytes) else str(raw).encode()
        self.heard.append(Heard(str(message.topic), payload, bool(message.retain), message.qos))

    def on(self, topic: str) -> list[Heard]:
        return [h for h in self.heard if h.topic == topic]

    async def wait_for(self, predicate: Any, timeout_s: float = 15.0, what: str = "a message") -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                topics = sorted({h.topic for h in self.heard})
                raise AssertionError(f"no {what} within {timeout_s} s; heard topics: {topics}")
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def subscribed(port: int, *args: Any, **kwargs: Any) -> AsyncIterator[Subscriber]:
    """A :class:`Subscriber` running (and connected) for the block."""
    sub = Subscriber(port, *args, **kwargs)
    async with asyncio.TaskGroup() as group:
        task = group.create_task(sub.run())
        try:
            async with asyncio.timeout(10):
                await sub.connected.wait()
            yield sub
        finally:
            task.cancel()
