"""The instance bootstrap: rendered user data, run against fake instance tools."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from rigs.bootstrap.status import read_status
from rigs.bootstrap.user_data import (
    USER_DATA_LIMIT,
    BootstrapSpec,
    InstancePaths,
    ready_check_command,
    render_user_data,
)
from rigs.contract import RigDefinitionError
from rigs.readiness import check_ready
from tests.rigs.test_vllm_rig import shellcheck

SECRET_ID = "rigbench/hf-token"
BUNDLE_SHA256 = "ab" * 32


def spec(**changes: object) -> BootstrapSpec:
    fields: dict[str, object] = {
        "rig": "vllm",
        "model": "google/gemma-4-E2B-it",
        "deadline_epoch": int(time.time()) + 3600,
        "bundle_s3_uri": "s3://rigbench-bundles/bundle/abababababababababababababababababababababababababababababababab.tar.gz",
        "region": "us-east-1",
        "hf_token_secret_id": SECRET_ID,
        **changes,
    }
    return BootstrapSpec.model_validate(fields)


@pytest.mark.parametrize("rig", ["vllm", "torch"])
@pytest.mark.slow
def test_user_data_passes_shellcheck_and_fits(rig: str) -> None:
    text = render_user_data(spec(rig=rig, settings={"max_model_len": 2048}))
    shellcheck(text)
    assert len(text.encode()) < USER_DATA_LIMIT
    assert "set -x" not in text


def test_steps_run_in_the_safe_order() -> None:
    text = render_user_data(spec())
    order = [
        'shutdown -h "+$minutes"',
        "nvidia-smi -L",
        'aws s3 cp --region "$REGION"',
        'if [[ "$bundle_sha256" != "$BUNDLE_SHA256" ]]; then',
        'tar -xzf "$ROOT/bundle.tar.gz"',
        'uv pip install --python "$ROOT/venv/bin/python"',
        'bash "$ROOT/install-vllm.sh"',
        "aws secretsmanager get-secret-value",  # after every install: no install sees it
        'systemctl enable --now "$UNIT"',
    ]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)


def test_token_goes_to_a_root_only_file_and_the_unit_restarts() -> None:
    text = render_user_data(spec())
    assert 'install -d -m 700 "$(dirname "$TOKEN_FILE")"' in text
    assert "umask 077" in text
    assert '--query SecretString --output text > "$TOKEN_FILE"' in text
    assert "Restart=on-failure" in text
    assert "StartLimitBurst=3" in text
    assert (
        "ExecStart=/opt/rigbench/venv/bin/python -m rigbench rig serve vllm "
        "--model google/gemma-4-E2B-it --port 8000" in text
    )


def test_the_rig_runs_as_a_user_of_its_own_and_reads_the_token_as_a_credential() -> None:
    unit = render_user_data(spec()).split("<<'UNIT_FILE'\n")[1].split("UNIT_FILE\n")[0]
    service = unit.split("[Service]\n")[1].split("[Install]")[0].splitlines()
    assert "DynamicUser=yes" in service
    assert not [line for line in service if line.startswith(("User=root", "Group=root"))]
    # Its only writable place is its cache; the root-only token file reaches it alone.
    assert "CacheDirectory=rigbench-rig" in service
    assert "Environment=RIGBENCH_CACHE=%C/rigbench-rig" in service
    assert "Environment=HOME=%C/rigbench-rig" in service
    assert "LoadCredential=hf-token:/etc/rigbench/hf_token" in service
    assert "Environment=RIGBENCH_HF_TOKEN_FILE=%d/hf-token" in service


def test_the_rig_cannot_reach_the_metadata_service() -> None:
    """The instance role's credentials (and so the secret) stay out of the rig's reach."""
    for model, secret in (("google/gemma-4-E2B-it", SECRET_ID), ("random:e2b", None)):
        text = render_user_data(spec(model=model, hf_token_secret_id=secret))
        unit = text.split("<<'UNIT_FILE'\n")[1].split("UNIT_FILE\n")[0]
        service = unit.split("[Service]\n")[1].split("[Install]")[0].splitlines()
        assert "IPAddressDeny=169.254.169.254 fd00:ec2::254" in service
        assert not [line for line in service if line.startswith("IPAddressAllow")]


def test_the_bundle_is_checked_against_the_sha256_its_key_names() -> None:
    text = render_user_data(spec())
    assert f"readonly BUNDLE_SHA256={BUNDLE_SHA256}" in text
    assert "bundle_sha256=$(sha256sum \"$ROOT/bundle.tar.gz\" | cut -d ' ' -f 1)" in text
    with pytest.raises(ValidationError, match="bundle_s3_uri"):
        spec(bundle_s3_uri="s3://rigbench-bundles/sweep-1/bundle.tar.gz")


def test_no_token_step_for_models_without_one() -> None:
    text = render_user_data(spec(model="random:e2b", hf_token_secret_id=None))
    assert "readonly TOKEN_SECRET_ID=''" in text
    # systemd refuses to start a unit whose credential file is missing.
    assert "LoadCredential" not in text
    assert "RIGBENCH_HF_TOKEN_FILE" not in text


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"rig": "nope"}, RigDefinitionError),
        ({"settings": {"no_such": 1}}, RigDefinitionError),
        ({"model": "x; rm -rf /"}, ValidationError),
        ({"bundle_s3_uri": "https://example.com/b.tgz"}, ValidationError),
        ({"region": "mars"}, ValidationError),
        ({"deadline_epoch": 5}, ValidationError),
    ],
)
def test_bad_specs_are_refused(changes: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        render_user_data(spec(**changes))


def _fake_instance(tmp_path: Path, **behaviour: str) -> tuple[Path, Path, Path]:
    """Fake nvidia-smi, aws, shutdown, systemctl, curl (IMDS), journalctl recording their
    calls; returns bin, calls, root."""
    bin_dir, calls, root = tmp_path / "bin", tmp_path / "calls", tmp_path / "instance"
    bin_dir.mkdir()
    tools = {
        "nvidia-smi": (
            'if [[ "$1" == -L ]]; then [[ "${FAKE_GPU:-1}" == 1 ]] || exit 9;'
            ' echo "GPU 0: NVIDIA T4G"; else echo "${FAKE_CC:-7.5}"; fi'
        ),
        "aws": (
            'if [[ -n "${FAKE_BUNDLE:-}" ]]; then printf %s "$FAKE_BUNDLE" > "${@: -1}"; fi;'
            ' exit "${FAKE_AWS_EXIT:-0}"'
        ),
        "shutdown": "exit 0",
        "systemctl": "exit 0",
        # IMDSv2: a token, then the instance id
        "curl": 'if [[ "$*" == *api/token* ]]; then echo tok; else echo i-0fake; fi',
        "journalctl": 'echo "rig: CUDA error: no kernel image is available"',
    }
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >> "{calls}"\n{body}\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir, calls, root


def _boot(
    tmp_path: Path, bootstrap: BootstrapSpec, **env: str
) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    bin_dir, calls, root = _fake_instance(tmp_path)
    paths = InstancePaths(
        status_file=str(root / "status.json"),
        token_file=str(root / "etc" / "hf_token"),
        log_file=str(root / "bootstrap.log"),
        rig_log_file=str(root / "rig.log"),
        upload_script=str(root / "upload-logs"),
        unit_dir=str(root / "units"),
    )
    text = render_user_data(bootstrap.model_copy(update={"root": str(root)}), paths)
    result = subprocess.run(
        ["bash", "-c", text],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
    )
    recorded = calls.read_text().splitlines() if calls.exists() else []
    return result, Path(paths.status_file), recorded


@pytest.mark.slow
def test_no_gpu_fails_fast_before_any_download(tmp_path: Path) -> None:
    result, status_file, calls = _boot(tmp_path, spec(), FAKE_GPU="0")
    assert result.returncode != 0
    status = read_status(status_file)
    assert status is not None
    assert (status.phase, status.step) == ("failed", "gpu")
    assert status.error is not None
    assert "no NVIDIA GPU" in status.error
    assert calls[0].startswith("shutdown -h +")  # the dead-man timer came first
    assert not any(call.startswith("aws") for call in calls)
    ready = check_ready("http://127.0.0.1:9", status_file=status_file)
    assert (ready.phase, ready.terminal) == ("failed", True)
    assert "no NVIDIA GPU" in ready.detail


@pytest.mark.slow
def test_wrong_gpu_fails_fast(tmp_path: Path) -> None:
    _, status_file, calls = _boot(tmp_path, spec(), FAKE_CC="8.6")
    status = read_status(status_file)
    assert status is not None
    assert status.phase == "failed"
    assert "compute capability 8.6, expected 7.5" in (status.error or "")
    assert not any(call.startswith("aws") for call in calls)


@pytest.mark.slow
def test_a_failed_download_is_reported_with_its_command(tmp_path: Path) -> None:
    _, status_file, calls = _boot(tmp_path, spec(), FAKE_AWS_EXIT="1")
    status = read_status(status_file)
    assert status is not None
    assert (status.phase, status.step) == ("failed", "bundle")
    assert "aws s3 cp" in (status.error or "")
    assert "exited with 1" in (status.error or "")
    assert any(call.startswith("aws s3 cp --region us-east-1") for call in calls)


@pytest.mark.slow
def test_a_bundle_that_is_not_what_its_key_names_is_not_used(tmp_path: Path) -> None:
    _, status_file, calls = _boot(tmp_path, spec(), FAKE_BUNDLE="tampered")
    status = read_status(status_file)
    assert status is not None
    assert (status.phase, status.step) == ("failed", "bundle")
    tampered = hashlib.sha256(b"tampered").hexdigest()
    assert status.error == (
        f"bundle sha256 is {tampered}, not {BUNDLE_SHA256} (its key): not using it"
    )
    assert not (tmp_path / "instance" / "bundle" / "pyproject.toml").exists()
    assert not any("secretsmanager" in call for call in calls)


@pytest.mark.slow
def test_a_passed_deadline_powers_off_at_once(tmp_path: Path) -> None:
    # Validation allows any epoch after 2020, so a stale deadline reaches the instance.
    result, status_file, calls = _boot(tmp_path, spec(deadline_epoch=1_700_000_000))
    assert result.returncode == 1
    assert calls == ["shutdown -h now"]
    status = read_status(status_file)
    assert status is not None
    assert "already passed" in (status.error or "")


@pytest.mark.slow
def test_ready_check_command_reports_a_failed_install_before_rigbench_exists(
    tmp_path: Path,
) -> None:
    status_file = tmp_path / "status.json"
    status_file.write_text(
        json.dumps({"phase": "failed", "step": "gpu", "error": "x", "updated": 1})
    )
    command = ready_check_command(spec(root=str(tmp_path / "nothing")))
    # its paths from the environment, as a local instance gives them
    env = {**os.environ, "RIGBENCH_STATUS_FILE": str(status_file)}
    env.pop("RIGBENCH_HOME", None)
    env.pop("RIGBENCH_PYTHON", None)

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, check=False, env=env
        )

    result = check()
    assert result.returncode == 3
    assert json.loads(result.stdout)["phase"] == "failed"
    status_file.write_text(json.dumps({"phase": "installing", "updated": 1}))
    result = check()
    assert result.returncode == 1


@pytest.mark.slow
def test_the_deadline_also_survives_a_reboot(tmp_path: Path) -> None:
    deadline = int(time.time()) + 3600
    _, _, calls = _boot(tmp_path, spec(deadline_epoch=deadline), FAKE_GPU="0")
    timer = (tmp_path / "instance" / "units" / "rigbench-deadline.timer").read_text()
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))
    assert f"OnCalendar={when}" in timer
    assert "Persistent=true" in timer
    assert "systemctl enable --now rigbench-deadline.timer" in calls
    assert calls[0].startswith("shutdown -h +")  # still the very first thing


LOG_PREFIX = (
    "s3://rigbench-bundles/reports/s-1/vllm/01/arn:aws:ec2:us-east-1:123456789012:instance/"
)


@pytest.mark.slow
def test_user_data_with_log_upload_passes_shellcheck_and_fits() -> None:
    text = render_user_data(spec(log_s3_prefix=LOG_PREFIX, settings={"max_model_len": 2048}))
    shellcheck(text)
    assert len(text.encode()) < USER_DATA_LIMIT


@pytest.mark.slow
def test_a_failed_boot_uploads_its_bootstrap_and_rig_logs_before_it_ends(tmp_path: Path) -> None:
    result, status_file, calls = _boot(tmp_path, spec(log_s3_prefix=LOG_PREFIX), FAKE_GPU="0")
    assert result.returncode != 0
    status = read_status(status_file)
    assert status is not None
    assert status.phase == "failed"
    uploads = [c for c in calls if c.startswith("aws s3 cp")]
    root = tmp_path / "instance"
    assert uploads == [
        f"aws s3 cp --region us-east-1 --only-show-errors {root}/bootstrap.log "
        f"{LOG_PREFIX}i-0fake/bootstrap.log",
        f"aws s3 cp --region us-east-1 --only-show-errors {root}/rig.log "
        f"{LOG_PREFIX}i-0fake/rig.log",
    ]
    assert "no kernel image" in (root / "rig.log").read_text()
    # ... and again when the instance shuts down, whoever ends it
    unit = (root / "units" / "rigbench-logs.service").read_text()
    assert f"ExecStop={root}/upload-logs us-east-1 {root}/bootstrap.log {root}/rig.log" in unit
    assert unit.rstrip().endswith("WantedBy=multi-user.target")
    assert "systemctl enable --now rigbench-logs.service" in calls


def test_no_upload_without_a_log_prefix() -> None:
    assert "rigbench-upload-logs" not in render_user_data(spec())


def test_a_labelled_rig_entry_s_log_prefix_is_accepted() -> None:
    # a sweep entry `torch@wrong` has its own boots, so its own prefix
    prefix = LOG_PREFIX.replace("/vllm/", "/torch@wrong/")
    text = render_user_data(spec(rig="torch", log_s3_prefix=prefix))
    assert "torch@wrong/01/arn:aws:ec2" in text
