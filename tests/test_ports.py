"""Ports for servers: outside the ephemeral range and reserved across processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infra.ports import ephemeral_range, free_port, release_port, reserve

ROOT = Path(__file__).resolve().parents[1]


def _other_process_reserves(port: int) -> bool:
    code = f"from infra.ports import reserve; print(reserve({port}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_a_free_port_is_outside_the_ephemeral_range_and_bindable() -> None:
    low, high = ephemeral_range()
    ports = [free_port() for _ in range(20)]
    try:
        assert len(set(ports)) == 20
        assert all(not (low <= p <= high) for p in ports), ports
        with socket.socket() as s:
            s.bind(("127.0.0.1", ports[0]))
    finally:
        for p in ports:
            release_port(p)


def test_a_port_this_process_holds_is_refused_to_another_until_released() -> None:
    port = free_port()
    try:
        assert not _other_process_reserves(port)
    finally:
        release_port(port)
    assert _other_process_reserves(port)


def test_a_reservation_ends_with_the_process_that_held_it() -> None:
    port = free_port()
    release_port(port)
    assert _other_process_reserves(port)  # the child held it, then exited
    assert reserve(port)
    release_port(port)


def test_without_a_folder_for_reservations_a_port_still_comes_from_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra import ports

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(ports, "RESERVATIONS", blocker / "lockbench-ports")
    port = ports.free_port()
    assert port in ports.pool()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
