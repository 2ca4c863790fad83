"""cleanrl_utils.submit_exp: what it registers and submits, read back from a local moto server (no AWS, no Docker:
moto's Docker-free Batch marks jobs finished without running them), and the in-container entry that resumes a run
after a spot interruption, run here as the container would run it."""

import json
import pathlib
import signal
import socket
import subprocess
import sys
import types
import urllib.request

import boto3
import pytest
from helpers import REPO, assert_clean_failure, load_checkpoint, run_utility, scalars, script_env, wait_for
from moto.server import ThreadedMotoServer

# every test here starts a script or a utility in a new process
pytestmark = pytest.mark.e2e

REGION = "us-east-1"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cleanrl:test"
EFS = "fs-0123456789abcdef0"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cleanrl-wandb-api-key-AbCdEf"
EXECUTION_ROLE = "arn:aws:iam::123456789012:role/cleanrl-batch-execution"
WANDB_KEY = "wandbkey-do-not-print-0123456789abcdef0123"
RUNNER = ["python", "-m", "cleanrl_utils.submit_exp", "--run-in-container"]


def post(url: str, body: dict):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 201)


@pytest.fixture(scope="module")
def moto_url():
    """A moto server on a free loopback port, with its Docker-free Batch; stopped after this module."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url, monkeypatch, tmp_path):
    """Fake credentials (and no AWS config of the user's), a fresh moto, and what a job queue needs: an IAM role, a
    compute environment and the queue `cleanrl`. Returns a boto3 Batch client against it (`.batch`) and its `.url`."""
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_SESSION_TOKEN", "WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    post(f"{moto_url}/moto-api/reset", {})
    post(f"{moto_url}/moto-api/config", {"batch": {"use_docker": False}})
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto_url)
    role = iam.create_role(RoleName="cleanrl-batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    batch = boto3.client("batch", region_name=REGION, endpoint_url=moto_url)
    environment = batch.create_compute_environment(
        computeEnvironmentName="cleanrl-spot", type="UNMANAGED", state="ENABLED", serviceRole=role
    )
    batch.create_job_queue(
        jobQueueName="cleanrl",
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment["computeEnvironmentArn"]}],
    )
    return types.SimpleNamespace(batch=batch, url=moto_url)


def submit(aws, *flags, cwd, **env):
    return run_utility(
        "submit_exp",
        "--docker-tag",
        IMAGE,
        "--efs-file-system-id",
        EFS,
        "--endpoint-url",
        aws.url,
        *flags,
        cwd=cwd,
        **env,
    )


def jobs(aws) -> dict[str, dict]:
    """The jobs moto holds, by name (array children left out: they share their parent's name)."""
    summaries = aws.batch.list_jobs(jobQueue="cleanrl", filters=[{"name": "JOB_NAME", "values": ["*"]}])["jobSummaryList"]
    ids = [s["jobId"] for s in summaries if ":" not in s["jobId"]]
    return {job["jobName"]: job for job in aws.batch.describe_jobs(jobs=ids)["jobs"]} if ids else {}


def job_definitions(aws) -> list[dict]:
    return sorted(
        aws.batch.describe_job_definitions(jobDefinitionName="cleanrl")["jobDefinitions"], key=lambda d: d["revision"]
    )


def resources(definition: dict) -> dict[str, str]:
    return {r["type"]: r["value"] for r in definition["containerProperties"]["resourceRequirements"]}


def assert_key_hidden(result: subprocess.CompletedProcess):
    assert WANDB_KEY not in result.stdout and WANDB_KEY not in result.stderr, "the W&B key was printed"


def split_command(command: list[str]) -> tuple[list[str], list[str]]:
    """A job's container command -> (the in-container entry's own flags, the script and its flags)."""
    assert command[: len(RUNNER)] == RUNNER, command
    separator = command.index("--")
    return command[len(RUNNER) : separator], command[separator + 1 :]


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_one_job_per_seed_with_its_resources_retries_and_the_secret(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", WANDB_KEY)  # the secret ARN wins: the plain key must not be sent either
    result = submit(
        aws,
        "--command", "python cleanrl/ppo.py --env-id CartPole-v1 --track --total-timesteps 50000",
        "--num-seeds", "3", "--start-seed", "5", "--num-vcpu", "4", "--num-memory", "16000", "--num-gpu", "1",
        "--num-retries", "4", "--wandb-key-secret-arn", SECRET_ARN, "--execution-role-arn", EXECUTION_ROLE,
        "--sweep-id", "sweep1",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_key_hidden(result)

    (definition,) = job_definitions(aws)
    assert definition["status"] == "ACTIVE" and definition["platformCapabilities"] == ["EC2"]
    container = definition["containerProperties"]
    assert container["image"] == IMAGE
    assert resources(definition) == {"VCPU": "4", "MEMORY": "16000", "GPU": "1"}
    assert container["secrets"] == [{"name": "WANDB_API_KEY", "valueFrom": SECRET_ARN}]
    assert container["executionRoleArn"] == EXECUTION_ROLE
    assert all(variable["name"] != "WANDB_API_KEY" for variable in container["environment"])
    # the run folders live on EFS, mounted where the job folders are
    (volume,) = container["volumes"]
    assert volume["efsVolumeConfiguration"]["fileSystemId"] == EFS
    assert container["mountPoints"] == [{"sourceVolume": volume["name"], "containerPath": "/cleanrl/runs", "readOnly": False}]
    # spot interruptions (and the script's checkpoint-on-SIGTERM exit) retry; bad input and crashes do not
    retry = definition["retryStrategy"]
    assert retry["attempts"] == 4
    rules = [{k: v.upper() if k == "action" else v for k, v in rule.items()} for rule in retry["evaluateOnExit"]]
    assert rules[0] == {"onStatusReason": "Host EC2*", "action": "RETRY"}
    assert {"onExitCode": "143", "action": "RETRY"} in rules
    assert {"onExitCode": "2", "action": "EXIT"} in rules and {"onExitCode": "1", "action": "EXIT"} in rules
    assert rules[-1] == {"onReason": "*", "action": "EXIT"}, "a failure no rule names must not be retried"

    submitted = jobs(aws)
    assert sorted(submitted) == [f"cleanrl-ppo-CartPole-v1-seed{seed}" for seed in (5, 6, 7)]
    for seed in (5, 6, 7):
        job = submitted[f"cleanrl-ppo-CartPole-v1-seed{seed}"]
        assert job["jobDefinition"] == definition["jobDefinitionArn"]
        assert job["tags"] == {"cleanrl-sweep": "sweep1"}
        entry, script = split_command(job["container"]["command"])
        # a deterministic folder per job, named after the job: a retry finds the checkpoint its first attempt left
        assert entry == ["--job-dir", f"/cleanrl/runs/sweep1/cleanrl-ppo-CartPole-v1-seed{seed}"]
        assert script[0] == "cleanrl/ppo.py"
        assert flag(script, "--env-id") == "CartPole-v1" and flag(script, "--total-timesteps") == "50000"
        assert flag(script, "--seed") == str(seed) and "--track" in script
        assert flag(script, "--checkpoint-interval") == "100000" and "--resume" not in script
        assert all(variable["name"] != "WANDB_API_KEY" for variable in job["container"]["environment"])
        assert "arrayProperties" not in job
    assert "cleanrl-ppo-CartPole-v1-seed7" in result.stdout and "registered job definition" in result.stdout


def test_array_jobs_from_a_command_file_and_job_definition_reuse(aws, tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text(
        "# what a sweep prints, one command per line\n"
        "OMP_NUM_THREADS=1 uv run python cleanrl/ppo.py --env-id CartPole-v1\n"
        "\n"
        "python cleanrl/dqn.py --env-id Acrobot-v1 --checkpoint-interval 20000\n"
    )
    flags = ["--command-file", str(commands), "--array", "--num-seeds", "4", "--start-seed", "10", "--sweep-id", "arr"]
    result = submit(aws, *flags, "--checkpoint-interval", "5000", cwd=tmp_path)
    assert result.returncode == 0, result.stderr

    (definition,) = job_definitions(aws)
    assert resources(definition) == {"VCPU": "2", "MEMORY": "7000"}, "no GPU requirement when --num-gpu is 0"
    submitted = jobs(aws)
    assert sorted(submitted) == ["cleanrl-dqn-Acrobot-v1", "cleanrl-ppo-CartPole-v1"]
    for name, script_name, interval in [
        ("cleanrl-ppo-CartPole-v1", "ppo.py", "5000"),
        ("cleanrl-dqn-Acrobot-v1", "dqn.py", "20000"),
    ]:
        job = submitted[name]
        assert job["arrayProperties"]["size"] == 4
        entry, script = split_command(job["container"]["command"])
        # each child takes its seed from AWS_BATCH_JOB_ARRAY_INDEX: 10, 11, 12, 13
        assert entry == ["--job-dir", f"/cleanrl/runs/arr/{name}", "--seed-from-array-index", "10"]
        assert script[0] == f"cleanrl/{script_name}" and "--seed" not in script
        assert flag(script, "--checkpoint-interval") == interval, "a command's own interval wins"
    environment = {v["name"]: v["value"] for v in submitted["cleanrl-ppo-CartPole-v1"]["container"]["environment"]}
    assert environment["OMP_NUM_THREADS"] == "1"

    # the same settings again reuse the job definition; other resources register a new revision
    again = submit(aws, *flags, "--checkpoint-interval", "5000", cwd=tmp_path)
    assert again.returncode == 0 and "reusing job definition" in again.stdout, again.stderr
    assert len(job_definitions(aws)) == 1
    bigger = submit(aws, *flags, "--num-vcpu", "8", cwd=tmp_path)
    assert bigger.returncode == 0, bigger.stderr
    assert [resources(d)["VCPU"] for d in job_definitions(aws)] == ["2", "8"]


def test_commands_with_their_own_seeds_from_stdin(aws, tmp_path):
    """What `python -m cleanrl_utils.benchmark --workers 0` prints, piped in: each line is one run with its own seed."""
    lines = [
        "python cleanrl/ppo.py --env-id CartPole-v1 --seed 1 --checkpoint-interval 100000",
        "python cleanrl/ppo.py --env-id CartPole-v1 --seed 2 --checkpoint-interval 100000",
        "python cleanrl/dqn.py --env-id Acrobot-v1 --seed 1 --checkpoint-interval 100000",
        "python cleanrl/ppo.py --env-id CartPole-v1 --seed 1 --learning-rate 0.001",  # same name as line 1 but for the flag
    ]
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.submit_exp", "--docker-tag", IMAGE, "--efs-file-system-id", EFS,
         "--endpoint-url", aws.url, "--command-file", "-", "--sweep-id", "piped"],
        input="\n".join(lines) + "\n", cwd=tmp_path, env=script_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    submitted = jobs(aws)
    expected = {
        "cleanrl-c1-ppo-CartPole-v1-seed1": ("1", None),
        "cleanrl-ppo-CartPole-v1-seed2": ("2", None),
        "cleanrl-dqn-Acrobot-v1-seed1": ("1", None),
        "cleanrl-c4-ppo-CartPole-v1-seed1": ("1", "0.001"),
    }
    assert sorted(submitted) == sorted(expected)
    for name, (seed, learning_rate) in expected.items():
        entry, script = split_command(submitted[name]["container"]["command"])
        assert entry == ["--job-dir", f"/cleanrl/runs/piped/{name}"]
        assert script.count("--seed") == 1 and flag(script, "--seed") == seed
        assert flag(script, "--learning-rate") == learning_rate
        assert script.count("--checkpoint-interval") == 1


def test_dry_run_prints_the_requests_with_the_key_masked_and_creates_nothing(aws, tmp_path):
    result = submit(
        aws, "--command", "python cleanrl/ppo.py --track", "--num-seeds", "2", "--dry-run", "--sweep-id", "dry",
        cwd=tmp_path, WANDB_API_KEY=WANDB_KEY,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_key_hidden(result)
    requests = [line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith("batch.")]
    calls = [call for call, _ in requests]
    assert calls == [
        "batch.describe_job_queues",
        "batch.describe_job_definitions",
        "batch.register_job_definition",
        "batch.submit_job",
        "batch.submit_job",
    ]
    definition = json.loads(requests[2][1])
    assert definition["retryStrategy"]["attempts"] == 3 and definition["containerProperties"]["image"] == IMAGE
    first_job = json.loads(requests[3][1])
    assert first_job["jobName"] == "cleanrl-ppo-CartPole-v1-seed1" and first_job["jobQueue"] == "cleanrl"
    assert flag(split_command(first_job["containerOverrides"]["command"])[1], "--seed") == "1"
    assert {"name": "WANDB_API_KEY", "value": "***"} in first_job["containerOverrides"]["environment"]
    # nothing reached moto
    assert job_definitions(aws) == [] and jobs(aws) == {}


def test_the_wandb_key_from_the_environment_reaches_the_jobs_but_no_output(aws, tmp_path):
    result = submit(aws, "--command", "python cleanrl/ppo.py --track", cwd=tmp_path, WANDB_API_KEY=WANDB_KEY)
    assert result.returncode == 0, result.stderr
    assert_key_hidden(result)
    assert "***" in result.stderr, "the user is told the key travels as a plain override"
    (job,) = jobs(aws).values()
    environment = {v["name"]: v["value"] for v in job["container"]["environment"]}
    assert environment["WANDB_API_KEY"] == WANDB_KEY
    assert job_definitions(aws)[0]["containerProperties"]["secrets"] == []
    # without --track the key stays home
    untracked = submit(
        aws, "--command", "python cleanrl/dqn.py", "--job-name-prefix", "quiet", cwd=tmp_path, WANDB_API_KEY=WANDB_KEY
    )
    assert untracked.returncode == 0, untracked.stderr
    (quiet,) = [job for name, job in jobs(aws).items() if name.startswith("quiet-")]
    assert all(variable["name"] != "WANDB_API_KEY" for variable in quiet["container"]["environment"])
    # nor does an error print it
    failed = submit(
        aws, "--command", "python cleanrl/ppo.py --track", "--job-queue", "nope", cwd=tmp_path, WANDB_API_KEY=WANDB_KEY
    )
    assert failed.returncode != 0
    assert_key_hidden(failed)


def test_a_missing_job_queue_is_one_clear_line_and_submits_nothing(aws, tmp_path):
    result = submit(aws, "--command", "python cleanrl/ppo.py", "--job-queue", "no-such-queue", cwd=tmp_path)
    assert_clean_failure(result, "--job-queue no-such-queue", "no such job queue in region us-east-1", "cloud/")
    assert len(result.stderr.strip().splitlines()) == 1
    assert job_definitions(aws) == [] and jobs(aws) == {}


def test_an_unreachable_endpoint_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_utility(
        "submit_exp", "--docker-tag", IMAGE, "--efs-file-system-id", EFS, "--command", "python cleanrl/ppo.py",
        "--endpoint-url", f"http://127.0.0.1:{port}", "--region", REGION,
        cwd=tmp_path, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_MAX_ATTEMPTS="1",
        AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        result.stderr.startswith("error: AWS Batch describe_job_queues failed")
        and len(result.stderr.strip().splitlines()) == 1
    )


@pytest.mark.parametrize(
    "flags, env, expected",
    [
        ([], {}, ["no command"]),
        (["--command", "python cleanrl/ppo.py", "--num-seeds", "0"], {}, ["--num-seeds must be >= 1"]),
        (["--command", "python cleanrl/nope.py"], {}, ["cleanrl/nope.py is not a script in cleanrl/"]),
        (["--command", "python other/ppo.py"], {}, ["other/ppo.py is not a script in cleanrl/"]),
        (["--command", "python cleanrl/ppo.py", "--num-vcpu", "-2"], {}, ["--num-vcpu must be >= 1"]),
        (["--command", "python cleanrl/ppo.py", "--num-memory", "-7000"], {}, ["--num-memory (MiB) must be >= 4"]),
        (["--command", "python cleanrl/ppo.py", "--num-gpu", "-1"], {}, ["--num-gpu must be >= 0"]),
        (["--command", "python cleanrl/ppo.py", "--num-retries", "11"], {}, ["--num-retries must be between 1 and 10"]),
        (["--command", "python cleanrl/ppo.py", "--checkpoint-interval", "0"], {}, ["--checkpoint-interval must be positive"]),
        (["--command", "python cleanrl/ppo.py", "--array"], {}, ["--array needs --num-seeds >= 2"]),
        (["--command", "python cleanrl/ppo.py --seed 3", "--num-seeds", "2"], {}, ["--command sets --seed 3"]),
        (["--command", "python cleanrl/ppo.py --resume runs/x"], {}, ["--command has --resume"]),
        (["--command", "python cleanrl/ppo.py --checkpoint-interval 0"], {}, ["--checkpoint-interval 0", "must be positive"]),
        (["--command", "torchrun cleanrl/ppo.py"], {}, ["'torchrun' before the script"]),
        (["--command", "python cleanrl/ppo.py", "--command", "python cleanrl/ppo.py"], {}, ["command 2 repeats command 1"]),
        (["--command", "python cleanrl/ppo.py --track"], {}, ["uses --track but there is no W&B key"]),
        (["--command", "WANDB_API_KEY=abc python cleanrl/ppo.py"], {}, ["keep the key out of commands"]),
        (["--command-file", "missing.txt"], {}, ["--command-file missing.txt: no such file"]),
        (["--command", "python cleanrl/ppo.py", "--wandb-key-secret-arn", SECRET_ARN], {}, ["needs --execution-role-arn"]),
        (["--command", "python cleanrl/ppo.py", "--job-name-prefix", "bad name"], {}, ["--job-name-prefix 'bad name'"]),
        (["--command", "python cleanrl/ppo.py"], {"AWS_DEFAULT_REGION": "", "AWS_REGION": ""}, ["no AWS region", "--region"]),
        (
            ["--command", "python cleanrl/ppo.py", "--efs-file-system-id", "not-an-efs"],
            {},
            ["--efs-file-system-id 'not-an-efs'"],
        ),
    ],
)
def test_bad_input_is_one_clear_line_before_contacting_aws(flags, env, expected, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    environment = {"AWS_DEFAULT_REGION": REGION, **env}
    # the endpoint is a closed port: validation must stop the run before any request
    result = run_utility(
        "submit_exp", "--docker-tag", IMAGE, "--efs-file-system-id", EFS, "--endpoint-url", "http://127.0.0.1:9", *flags,
        cwd=tmp_path, **environment,
    )  # fmt: skip
    assert_clean_failure(result, *expected)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_missing_efs_file_system_is_bad_input(tmp_path):
    result = run_utility(
        "submit_exp",
        "--docker-tag",
        IMAGE,
        "--command",
        "python cleanrl/ppo.py",
        "--region",
        REGION,
        "--dry-run",
        cwd=tmp_path,
    )
    assert_clean_failure(result, "--efs-file-system-id is missing", "submit_exp_flags")


# ---------------------------------------------------------------- the in-container entry, without a container


def start_entry(job_dir: pathlib.Path, *args: str, cwd: pathlib.Path, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cleanrl_utils.submit_exp", "--run-in-container", "--job-dir", str(job_dir), *args],
        cwd=cwd,
        env=script_env(PYTHONPATH=str(REPO), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def checkpoints_in(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.rglob("checkpoint.pt"))


def test_a_retried_attempt_resumes_the_run_its_killed_attempt_left(tmp_path):
    """Attempt 1 is stopped as a spot interruption stops it (SIGTERM after a checkpoint); attempt 2, the same command
    with AWS_BATCH_JOB_ATTEMPT=2, continues that run folder to the end instead of starting a new one."""
    job_dir = tmp_path / "efs" / "sweep" / "cleanrl-ppo-CartPole-v1-seed1"
    workdir = tmp_path / "image"  # the container's working directory: nothing may land there
    workdir.mkdir()
    budget = 30720
    command = ["--", "cleanrl/ppo.py", "--env-id", "CartPole-v1", "--seed", "1", "--total-timesteps", str(budget),
               "--num-envs", "2", "--num-steps", "128", "--checkpoint-interval", "256"]  # fmt: skip

    first = start_entry(job_dir, *command, cwd=workdir, AWS_BATCH_JOB_ATTEMPT="1")
    wait_for(lambda: checkpoints_in(job_dir), first)
    first.send_signal(signal.SIGTERM)  # the entry exec'd the script: the signal reaches it
    stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, f"the run was not stopped mid-way: {stderr[-2000:]}"
    assert "attempt 1: starting" in stdout
    (checkpoint,) = checkpoints_in(job_dir)
    stopped_at = load_checkpoint(checkpoint)["global_step"]
    assert 0 < stopped_at < budget

    second = start_entry(job_dir, *command, cwd=workdir, AWS_BATCH_JOB_ATTEMPT="2")
    stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr[-3000:]
    run_dir = checkpoint.parent
    assert f"attempt 2: resuming {run_dir}" in stdout
    assert checkpoints_in(job_dir) == [checkpoint], "the retry must continue the same run folder, not start a new one"
    assert load_checkpoint(checkpoint)["global_step"] == budget
    steps = [step for step, _ in scalars(run_dir, "charts/SPS")]
    assert steps == sorted(set(steps)), "a step was logged twice"
    assert steps[-1] == budget and any(step <= stopped_at for step in steps), "the resumed run lost its first part"
    assert json.loads((run_dir / "args.json").read_text())["args"]["seed"] == 1
    assert not (workdir / "runs").exists()


def test_an_array_child_takes_its_seed_and_drops_a_folder_without_checkpoint(tmp_path):
    job_dir = tmp_path / "efs" / "sweep" / "cleanrl-ppo-CartPole-v1"
    stale = job_dir / "seed5" / "runs" / "CartPole-v1__ppo__5__1700000000"
    stale.mkdir(parents=True)
    (stale / "events.out.tfevents.1700000000.host").write_bytes(b"")  # an attempt that died before its first checkpoint
    process = start_entry(
        job_dir, "--seed-from-array-index", "3", "--", "cleanrl/ppo.py", "--total-timesteps", "512", "--num-envs", "2",
        "--num-steps", "128", "--checkpoint-interval", "256",
        cwd=tmp_path, AWS_BATCH_JOB_ARRAY_INDEX="2", AWS_BATCH_JOB_ATTEMPT="2",
    )  # fmt: skip
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    assert "holds no checkpoint" in stdout and not stale.exists()
    (run_dir,) = [p.parent for p in (job_dir / "seed5" / "runs").rglob("args.json")]
    assert json.loads((run_dir / "args.json").read_text())["args"]["seed"] == 5


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["--seed-from-array-index", "1", "--", "cleanrl/ppo.py"], {}, ["needs AWS_BATCH_JOB_ARRAY_INDEX"]),
        ([], {}, ["no script to run"]),
        (["--", "cleanrl/nope.py"], {}, ["cleanrl/nope.py is not a script"]),
    ],
)
def test_the_entry_refuses_what_it_cannot_run(args, env, expected, tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_BATCH_JOB_ARRAY_INDEX", raising=False)
    process = start_entry(tmp_path / "job", *args, cwd=tmp_path, **env)
    stdout, stderr = process.communicate(timeout=60)
    assert_clean_failure(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), *expected)
