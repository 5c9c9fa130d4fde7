from __future__ import annotations

from pathlib import Path, PurePosixPath

from click.testing import CliRunner

from draplugin.driver import checkpoint
from draplugin.main import cli
from draplugin.testing import ENTRY
from libdisplay import cdi


def test_checkpoint_prints_the_file_and_names_a_broken_one(tmp_path: Path) -> None:
    checkpoint.save(checkpoint.path_in(tmp_path), checkpoint.EMPTY.with_claim(ENTRY))
    shown = CliRunner().invoke(cli, ["checkpoint", f"--plugin-dir={tmp_path}"])
    assert shown.exit_code == 0
    assert shown.output == checkpoint.render(checkpoint.EMPTY.with_claim(ENTRY))
    checkpoint.path_in(tmp_path).write_text("{")
    broken = CliRunner().invoke(cli, ["checkpoint", f"--plugin-dir={tmp_path}"])
    assert broken.exit_code == 1
    assert f"checkpoint {checkpoint.path_in(tmp_path)} is not valid" in broken.output


def test_cdi_lists_this_drivers_specs_only(tmp_path: Path) -> None:
    delivery = cdi.SocketDelivery(host_dir=PurePosixPath("/run/d"),
                                  container_dir=PurePosixPath("/run/d"),
                                  socket_name="wayland-0")
    cdi.write_spec("a1-uid", (cdi.ClaimedOutput(device="card0-dp-1", output="DP-1"),), delivery,
                   cdi_dir=tmp_path)
    (tmp_path / "k8s.gpu.example.com-gpu_x.yaml").write_text("{}")
    shown = CliRunner().invoke(cli, ["cdi", f"--cdi-root={tmp_path}"])
    assert shown.exit_code == 0
    assert shown.output == f"a1-uid\t{cdi.spec_path('a1-uid', cdi_dir=tmp_path)}\n"


def test_checkpoint_of_a_running_driver_without_claims_is_empty(tmp_path: Path) -> None:
    (tmp_path / "dra.sock").touch()
    shown = CliRunner().invoke(cli, ["checkpoint", f"--plugin-dir={tmp_path}"])
    assert (shown.exit_code, shown.output) == (0, checkpoint.render(checkpoint.EMPTY))


def test_checkpoint_refuses_a_path_that_is_not_the_plugin_dir(tmp_path: Path) -> None:
    missing = CliRunner().invoke(cli, ["checkpoint", f"--plugin-dir={tmp_path / 'nowhere'}"])
    assert missing.exit_code == 1
    assert f"plugin dir {tmp_path / 'nowhere'} is not a directory" in missing.output
    other = CliRunner().invoke(cli, ["checkpoint", f"--plugin-dir={tmp_path}"])
    assert other.exit_code == 1
    assert "holds neither checkpoint.json nor dra.sock" in other.output


def test_cdi_refuses_a_root_that_is_not_a_directory(tmp_path: Path) -> None:
    shown = CliRunner().invoke(cli, ["cdi", f"--cdi-root={tmp_path / 'nonexistent'}"])
    assert shown.exit_code == 1
    assert f"CDI root {tmp_path / 'nonexistent'} is not a directory" in shown.output


def test_cdi_says_so_when_no_spec_is_there(tmp_path: Path) -> None:
    shown = CliRunner().invoke(cli, ["cdi", f"--cdi-root={tmp_path}"])
    assert (shown.exit_code, shown.stdout) == (0, "")
    assert f"no CDI spec of this driver in {tmp_path}" in shown.stderr


def test_operator_refuses_an_unknown_fault_point(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["operator", "--node-name=n1", "--fault-point=nowhere", f"--plugin-dir={tmp_path}"]
    )
    assert result.exit_code == 2
    assert "'nowhere' is not one of prepare-started" in result.output


def test_operator_refuses_an_unknown_delivery(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["operator", "--node-name=n1", f"--plugin-dir={tmp_path}"],
        env={"SOCKET_DELIVERY": "everyone"},
    )
    assert result.exit_code == 2
    assert "'everyone' is not one of 'layout', 'shared'" in result.output
