"""Vm.boot makes a boot again only when the guest's kernel panicked before init ran; no QEMU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.vm import qemu

PANIC = ("[    5.13] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI\n"
         "[    5.14] Kernel panic - not syncing\n")


def _vm(tmp_path: Path, boots: list[Callable[[Path], None]]) -> tuple[qemu.Vm, list[int]]:
    """A Vm whose boots write the serial log as each of `boots` says, and fail unless the log
    holds the ready line; the attempts are counted."""
    image = qemu.GuestImage(tmp_path / "k", tmp_path / "i", tmp_path / "r")
    vm = qemu.Vm(image, share=tmp_path / "share", workdir=tmp_path)
    attempts: list[int] = []

    def boot_once() -> None:
        boots[len(attempts)](vm.serial_log)
        attempts.append(1)
        if qemu.READY_LINE not in vm.serial():
            raise qemu.VmError("QEMU exited before the ready line")

    vm._boot_once = boot_once  # type: ignore[method-assign]
    return vm, attempts


def _writes(text: str) -> Callable[[Path], None]:
    def write(log: Path) -> None:
        log.write_text(text)
    return write


def test_a_kernel_panic_before_init_is_booted_again_once_and_its_log_kept(tmp_path: Path) -> None:
    vm, attempts = _vm(tmp_path, [_writes(PANIC), _writes(qemu.READY_LINE + "\n")])
    vm.boot()
    assert len(attempts) == 2
    assert "Kernel panic" in (tmp_path / "serial-panic-1.log").read_text()
    assert qemu.READY_LINE in vm.serial()


def test_a_second_panic_fails_the_boot(tmp_path: Path) -> None:
    vm, attempts = _vm(tmp_path, [_writes(PANIC), _writes(PANIC)])
    with pytest.raises(qemu.VmError):
        vm.boot()
    assert len(attempts) == qemu.BOOT_ATTEMPTS


@pytest.mark.parametrize("serial", ["vm-init: no share\n", "booted, then no init\n"],
                         ids=["no-share", "no-panic"])
def test_a_boot_that_failed_without_a_kernel_panic_is_not_made_again(
        tmp_path: Path, serial: str) -> None:
    vm, attempts = _vm(tmp_path, [_writes(serial), _writes(qemu.READY_LINE + "\n")])
    with pytest.raises(qemu.VmError):
        vm.boot()
    assert len(attempts) == 1
