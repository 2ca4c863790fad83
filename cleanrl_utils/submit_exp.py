"""Submit cleanrl runs to AWS Batch on spot instances: each run is retried after a spot interruption and continues
from its last checkpoint instead of starting over.

    uv run python -m cleanrl_utils.submit_exp $(terraform -chdir=cloud output -raw submit_exp_flags) \\
        $(terraform -chdir=cloud output -raw wandb_flags) \\
        --docker-tag "$(terraform -chdir=cloud output -raw ecr_repository_url):$(git rev-parse --short HEAD)" \\
        --command "python cleanrl/ppo.py --env-id CartPole-v1 --track" --num-seeds 3 --num-vcpu 2 --num-memory 7000
    ... --dry-run                       # print the AWS requests (secrets masked); send nothing
    ... --array                         # one array job per command instead of one job per seed
    ... --command-file commands.txt     # one command per line (`-` reads stdin), e.g. what
                                        # `python -m cleanrl_utils.benchmark --workers 0` prints

The infrastructure (job queue, spot compute environment, EFS for the run folders, ECR, the W&B secret) is the
Terraform in cloud/ (see cloud/README.md); its output `submit_exp_flags` gives the flags that point at it.

What it sends (boto3, `batch` client):
1. `describe_job_queues`: the queue must exist and be ENABLED.
2. a job definition named `--job-name-prefix`: the image, vCPU / memory / GPU, the EFS file system mounted at
   `--storage-path` (/cleanrl/runs), the W&B key as a secret from Secrets Manager or SSM (`--wandb-key-secret-arn`),
   and the retry strategy: `--num-retries` attempts (AWS's `retryStrategy.attempts`, the first one included) where a
   lost host ("Host EC2*": the spot instance was reclaimed) and exit code 143 (the script checkpointed on SIGTERM)
   retry, while exit code 2 (bad input), 1 (a crash) and anything else fail at once. An ACTIVE revision with the same
   properties (tag `cleanrl-spec`) is reused; otherwise a new revision is registered.
3. `submit_job` per run, named `{prefix}-{script}-{env id}-seed{seed}` (plus `c{N}-`, the command's number, where
   two commands would share a name), tagged `cleanrl-sweep={sweep id}`; its command is this module's in-container entry:

       python -m cleanrl_utils.submit_exp --run-in-container --job-dir /cleanrl/runs/{sweep id}/{job name} \\
           -- cleanrl/ppo.py --env-id CartPole-v1 --seed 1 --checkpoint-interval 100000

   It runs the script with the job folder (on EFS, so it outlives the instance) as working directory: the run folder
   is `{job dir}/runs/{run_name}`. When that folder already holds a checkpoint (AWS_BATCH_JOB_ATTEMPT > 1 after a spot
   interruption, or a re-submission with the same `--sweep-id`) it continues with `--resume` instead; the script
   replaces this process (exec), so the SIGTERM that precedes the end of a spot instance reaches it and it writes a
   checkpoint. With `--array`, one job per command runs `--num-seeds` children: seed = `--start-seed` +
   AWS_BATCH_JOB_ARRAY_INDEX, folder `{job dir}/seed{seed}`.

The W&B key: `--wandb-key-secret-arn` (preferred) puts a reference in the job definition; otherwise WANDB_API_KEY from
your environment is sent as a container environment override (readable by whoever can describe the jobs), and only
when a command uses --track. It is never printed: requests and messages show `***`.
"""

import copy
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field

import tyro

# the scripts sit beside this package in the repository (and in the image the Dockerfile builds: /cleanrl/cleanrl)
CLEANRL_SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "cleanrl"
SECRET_ENV = "WANDB_API_KEY"
MASK = "***"
# tag on the job definitions we register: a digest of their properties, so an identical one is reused
SPEC_TAG = "cleanrl-spec"
SWEEP_TAG = "cleanrl-sweep"
# AWS Batch tries these in order and takes the first that matches; a failure that matches none is retried
RETRY_RULES = [
    # the instance went away under the job: a reclaimed spot instance ("Host EC2 (instance i-...) terminated.")
    {"onStatusReason": "Host EC2*", "action": "RETRY"},
    # 128 + SIGTERM: the script was asked to stop, wrote a checkpoint and wants to be continued
    {"onExitCode": "143", "action": "RETRY"},
    # the script's bad-input exit and a crash would fail the same way again
    {"onExitCode": "2", "action": "EXIT"},
    {"onExitCode": "1", "action": "EXIT"},
    {"onReason": "*", "action": "EXIT"},
]
# what may come before the script in a command: the container runs its own python
LAUNCHER = re.compile(r"^((.*/)?python(3(\.\d+)?)?|uv|poetry|run|-u)$")
ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
JOB_NAME_LENGTH = 128  # AWS Batch: letters, numbers, hyphens and underscores, starting with a letter or number


class InputError(ValueError):
    """Bad input: one line on stderr, exit code 2."""


def fail(message: str, code: int = 2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


@dataclass
class Cli:
    docker_tag: str
    """the image built from the project's Dockerfile and pushed to ECR: `{ecr_repository_url output}:{tag}`"""
    command: tyro.conf.UseAppendAction[list[str]] = field(default_factory=list)
    """a run to submit, e.g. "python cleanrl/ppo.py --env-id CartPole-v1 --track"; repeat the flag for several"""
    command_file: pathlib.Path | None = None
    """a file with one command per line (blank lines and `#` comments skipped; `-` reads stdin)"""
    num_seeds: int = 1
    """runs per command, with seeds --start-seed, --start-seed + 1, ... (a command that sets --seed itself is one run)"""
    start_seed: int = 1
    """the first seed"""
    job_queue: str = "cleanrl"
    """the AWS Batch job queue (`terraform -chdir=cloud output job_queue`)"""
    num_vcpu: int = 2
    """vCPUs per job"""
    num_memory: int = 7000
    """memory per job, in MiB"""
    num_gpu: int = 0
    """GPUs per job (the compute environment needs GPU instance types, e.g. g4dn)"""
    num_retries: int = 3
    """attempts per job (AWS Batch's retryStrategy.attempts, 1-10): 3 = the first and up to two after spot interruptions"""
    checkpoint_interval: int = 100_000
    """steps between checkpoints, added to commands that do not set it: the most work a spot interruption costs"""
    efs_file_system_id: str | None = None
    """the EFS file system (`efs_file_system_id` output) that holds the run folders, so a retry finds its checkpoint"""
    storage_path: str = "/cleanrl/runs"
    """where the EFS file system is mounted in the container; job folders are `{storage_path}/{sweep_id}/{job name}`"""
    execution_role_arn: str | None = None
    """the ECS task execution role that reads the W&B secret (needed with --wandb-key-secret-arn)"""
    wandb_key_secret_arn: str | None = None
    """a Secrets Manager secret (or SSM parameter) ARN holding the W&B API key, given to jobs as WANDB_API_KEY"""
    array: bool = False
    """one array job per command (size --num-seeds) instead of one job per seed"""
    job_name_prefix: str = "cleanrl"
    """the start of every job name, and the job definition's name"""
    sweep_id: str | None = None
    """the sweep's folder on EFS (default: UTC time, YYYYmmdd-HHMMSS); an earlier sweep's id resumes its checkpoints"""
    region: str | None = None
    """the AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / your AWS config)"""
    endpoint_url: str | None = None
    """another AWS Batch endpoint (a compatible service, or a local moto server in tests)"""
    dry_run: bool = False
    """print the requests (secrets masked) and send nothing"""


@dataclass
class InContainer:
    """The entry each job's container runs (`python -m cleanrl_utils.submit_exp --run-in-container ...`)."""

    job_dir: pathlib.Path
    """the job's folder on persistent storage; the script runs there, so its run folder is `{job_dir}/runs/...`"""
    seed_from_array_index: int | None = None
    """array jobs: the seed is this + AWS_BATCH_JOB_ARRAY_INDEX, and the folder `{job_dir}/seed{seed}`"""
    command: tyro.conf.Positional[list[str]] = field(default_factory=list)
    """after `--`: cleanrl/<script>.py and its flags"""


# ---------------------------------------------------------------- commands -> runs


@dataclass
class Run:
    """One job: its name, folder and the command its container runs."""

    job_name: str
    job_dir: str
    container_command: list[str]
    environment: dict[str, str]
    array_size: int | None = None


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag value` or `--flag=value` (the last one, as tyro reads them), or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag:
            value = args[i + 1] if i + 1 < len(args) else ""
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def has_flag(args: list[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in args)


def script_default_env_id(script: pathlib.Path) -> str:
    match = re.search(r'env_id: str = "([^"]+)"', script.read_text())
    return match.group(1) if match else ""


def parse_command(text: str, where: str) -> tuple[dict[str, str], str, list[str]]:
    """`[VAR=value ...] [python|uv run python|...] cleanrl/<script>.py flags...` -> (environment, script file name,
    flags), or an InputError naming the command."""
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise InputError(f"{where}: cannot split {text!r} into words ({e})") from None
    environment = {}
    while tokens and ENV_ASSIGNMENT.match(tokens[0]):
        name, value = ENV_ASSIGNMENT.match(tokens.pop(0)).groups()
        environment[name] = value
    if SECRET_ENV in environment:
        raise InputError(
            f"{where} sets {SECRET_ENV}: keep the key out of commands (--wandb-key-secret-arn, or {SECRET_ENV} in your "
            "environment)"
        )
    script_index = next((i for i, token in enumerate(tokens) if token.endswith(".py")), None)
    if script_index is None:
        raise InputError(f"{where}: no cleanrl/<script>.py in {text!r}")
    for token in tokens[:script_index]:
        if not LAUNCHER.match(token):
            raise InputError(
                f"{where}: {token!r} before the script; the container runs the script with its own python, so give "
                "the command as `python cleanrl/<script>.py --flag value ...`"
            )
    script = pathlib.PurePosixPath(tokens[script_index])
    path = CLEANRL_SCRIPTS / script.name
    if script.parent.name != "cleanrl" or not path.is_file():
        available = ", ".join(sorted(p.name for p in CLEANRL_SCRIPTS.glob("*.py")))
        raise InputError(f"{where}: {script} is not a script in cleanrl/ (there are: {available})")
    if "checkpoint_interval" not in path.read_text():
        raise InputError(f"{where}: {script.name} cannot write checkpoints, so a spot retry could not resume it")
    args = tokens[script_index + 1 :]
    if has_flag(args, "--resume"):
        raise InputError(f"{where} has --resume: the job resumes by itself after an interruption; drop it")
    return environment, script.name, args


def read_commands(cli: Cli) -> list[str]:
    commands = list(cli.command)
    if cli.command_file is not None:
        if str(cli.command_file) == "-":
            text = sys.stdin.read()
        elif not cli.command_file.is_file():
            raise InputError(f"--command-file {cli.command_file}: no such file")
        else:
            text = cli.command_file.read_text()
        commands += [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not commands:
        raise InputError('no command: give --command "python cleanrl/ppo.py --env-id CartPole-v1" or --command-file FILE')
    return commands


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-_")


def plan_runs(cli: Cli, sweep_id: str) -> list[Run]:
    """Every job to submit, or an InputError."""
    commands = read_commands(cli)
    parsed, seen = [], []
    for number, text in enumerate(commands, 1):
        where = f"command {number}" if len(commands) > 1 else "--command"
        environment, script, args = parse_command(text, where)
        if (environment, script, args) in seen:
            raise InputError(f"{where} repeats command {seen.index((environment, script, args)) + 1}: {text!r}")
        seen.append((environment, script, args))
        seed = flag_value(args, "--seed")
        if seed is not None:
            if cli.num_seeds > 1 or cli.array:
                raise InputError(
                    f"{where} sets --seed {seed}: drop it (seeds come from --start-seed and --num-seeds), or submit it "
                    "alone with --num-seeds 1 and without --array"
                )
            if not re.fullmatch(r"-?\d+", seed):
                raise InputError(f"{where}: --seed {seed!r} is not an integer")
        interval = flag_value(args, "--checkpoint-interval")
        if interval is None:
            args = [*args, "--checkpoint-interval", str(cli.checkpoint_interval)]
        elif not re.fullmatch(r"\d+", interval) or int(interval) < 1:
            raise InputError(
                f"{where} sets --checkpoint-interval {interval}: it must be positive (a spot retry resumes from it)"
            )
        env_id = flag_value(args, "--env-id") or script_default_env_id(CLEANRL_SCRIPTS / script)
        parsed.append((number, script, args, environment, seed, slug(f"{pathlib.Path(script).stem}-{env_id}")))

    # seeds per command (None: an array job's children take theirs in the container)
    planned = []
    for number, script, args, environment, seed, stem in parsed:
        if cli.array:
            seeds = [None]
        else:
            seeds = [int(seed)] if seed is not None else list(range(cli.start_seed, cli.start_seed + cli.num_seeds))
        planned.append((number, script, args, environment, seed is not None, stem, seeds))
    # a command's number goes into its job names only where script, env id and seed alone would repeat a name
    pairs = [(stem, s) for *_, stem, seeds in planned for s in seeds]
    runs = []
    sweep_dir = f"{cli.storage_path.rstrip('/')}/{sweep_id}"
    entry = ["python", "-m", "cleanrl_utils.submit_exp", "--run-in-container"]
    for number, script, args, environment, has_seed, stem, seeds in planned:
        numbered = any(pairs.count((stem, s)) > 1 for s in seeds)
        base = f"{cli.job_name_prefix}-" + (f"c{number}-" if numbered else "") + stem
        for s in seeds:
            if s is None:
                name = base[:JOB_NAME_LENGTH].rstrip("-_")
                flags = ["--job-dir", f"{sweep_dir}/{name}", "--seed-from-array-index", str(cli.start_seed)]
                runs.append(
                    Run(
                        name,
                        f"{sweep_dir}/{name}",
                        [*entry, *flags, "--", f"cleanrl/{script}", *args],
                        environment,
                        cli.num_seeds,
                    )
                )
                continue
            suffix = f"-seed{s}"
            name = base[: JOB_NAME_LENGTH - len(suffix)].rstrip("-_") + suffix
            run_args = args if has_seed else [*args, "--seed", str(s)]
            command = [*entry, "--job-dir", f"{sweep_dir}/{name}", "--", f"cleanrl/{script}", *run_args]
            runs.append(Run(name, f"{sweep_dir}/{name}", command, environment))
    names = [run.job_name for run in runs]
    for name in names:
        if names.count(name) > 1:
            raise InputError(f"two runs would share the job name and folder {name}: give them different --env-id or seeds")
    return runs


# ---------------------------------------------------------------- validation and the requests


def validate(cli: Cli) -> None:
    if not cli.docker_tag.strip() or any(c.isspace() for c in cli.docker_tag):
        raise InputError(f"--docker-tag {cli.docker_tag!r}: expected an image reference such as <registry>/cleanrl:latest")
    if cli.num_seeds < 1:
        raise InputError(f"--num-seeds must be >= 1, got {cli.num_seeds}")
    if cli.array and cli.num_seeds < 2:
        raise InputError(f"--array needs --num-seeds >= 2 (an AWS Batch array has 2 to 10000 children), got {cli.num_seeds}")
    if cli.num_seeds > 10_000:
        raise InputError(f"--num-seeds must be <= 10000, got {cli.num_seeds}")
    if cli.num_vcpu < 1:
        raise InputError(f"--num-vcpu must be >= 1, got {cli.num_vcpu}")
    if cli.num_memory < 4:
        raise InputError(f"--num-memory (MiB) must be >= 4, got {cli.num_memory}")
    if cli.num_gpu < 0:
        raise InputError(f"--num-gpu must be >= 0, got {cli.num_gpu}")
    if not 1 <= cli.num_retries <= 10:
        raise InputError(f"--num-retries must be between 1 and 10 (AWS Batch's attempts), got {cli.num_retries}")
    if cli.checkpoint_interval < 1:
        raise InputError(
            f"--checkpoint-interval must be positive (a spot retry resumes from it), got {cli.checkpoint_interval}"
        )
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", cli.job_name_prefix):
        raise InputError(
            f"--job-name-prefix {cli.job_name_prefix!r}: use up to 64 letters, digits, '-' and '_' (a letter or digit first)"
        )
    if cli.sweep_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", cli.sweep_id):
        raise InputError(f"--sweep-id {cli.sweep_id!r}: use up to 64 letters, digits, '.', '-' and '_'")
    if not cli.job_queue.strip():
        raise InputError("--job-queue is empty")
    if cli.efs_file_system_id is None:
        raise InputError(
            "--efs-file-system-id is missing: run folders and checkpoints live on EFS so that a spot retry resumes "
            "(`terraform -chdir=cloud output -raw submit_exp_flags` prints it with the other flags)"
        )
    if not re.fullmatch(r"fs-[0-9a-f]+", cli.efs_file_system_id):
        raise InputError(f"--efs-file-system-id {cli.efs_file_system_id!r}: expected an EFS id such as fs-0123456789abcdef0")
    if not cli.storage_path.startswith("/"):
        raise InputError(f"--storage-path {cli.storage_path!r}: must be an absolute path in the container")
    if cli.wandb_key_secret_arn is not None:
        if not cli.wandb_key_secret_arn.startswith("arn:"):
            raise InputError(f"--wandb-key-secret-arn {cli.wandb_key_secret_arn!r}: expected a Secrets Manager or SSM ARN")
        if cli.execution_role_arn is None:
            raise InputError(
                "--wandb-key-secret-arn needs --execution-role-arn: the role ECS uses to read the secret "
                "(`terraform -chdir=cloud output execution_role_arn`)"
            )
    if cli.execution_role_arn is not None and not cli.execution_role_arn.startswith("arn:"):
        raise InputError(f"--execution-role-arn {cli.execution_role_arn!r}: expected an IAM role ARN")


def resolve_region(cli: Cli) -> str:
    region = cli.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        try:
            import boto3
            import botocore.exceptions
        except ImportError:  # no boto3: no AWS config to read the region from either
            boto3 = None
        if boto3 is not None:
            try:
                region = boto3.session.Session().region_name
            except botocore.exceptions.BotoCoreError:  # e.g. a broken AWS config: the error below says what to do
                region = None
    if not region:
        raise InputError("no AWS region: give --region (e.g. --region us-east-1) or set AWS_DEFAULT_REGION")
    return region


def job_definition_request(cli: Cli) -> dict:
    resources = [{"type": "VCPU", "value": str(cli.num_vcpu)}, {"type": "MEMORY", "value": str(cli.num_memory)}]
    if cli.num_gpu > 0:
        resources.append({"type": "GPU", "value": str(cli.num_gpu)})
    container = {
        "image": cli.docker_tag,
        # every job overrides it; run bare, the entry says that it needs a command
        "command": ["python", "-m", "cleanrl_utils.submit_exp", "--run-in-container"],
        "resourceRequirements": resources,
        "volumes": [
            {
                "name": "runs",
                "efsVolumeConfiguration": {"fileSystemId": cli.efs_file_system_id, "transitEncryption": "ENABLED"},
            }
        ],
        "mountPoints": [{"sourceVolume": "runs", "containerPath": cli.storage_path, "readOnly": False}],
    }
    if cli.execution_role_arn is not None:
        container["executionRoleArn"] = cli.execution_role_arn
    if cli.wandb_key_secret_arn is not None:
        container["secrets"] = [{"name": SECRET_ENV, "valueFrom": cli.wandb_key_secret_arn}]
    request = {
        "jobDefinitionName": cli.job_name_prefix,
        "type": "container",
        "platformCapabilities": ["EC2"],
        "containerProperties": container,
        "retryStrategy": {"attempts": cli.num_retries, "evaluateOnExit": copy.deepcopy(RETRY_RULES)},
    }
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]
    request["tags"] = {SPEC_TAG: digest}
    return request


def submit_job_requests(cli: Cli, runs: list[Run], sweep_id: str, job_definition: str, wandb_key: str | None) -> list[dict]:
    requests = []
    for run in runs:
        environment = [{"name": name, "value": value} for name, value in run.environment.items()]
        if wandb_key is not None:
            environment.append({"name": SECRET_ENV, "value": wandb_key})
        overrides = {"command": run.container_command}
        if environment:
            overrides["environment"] = environment
        request = {
            "jobName": run.job_name,
            "jobQueue": cli.job_queue,
            "jobDefinition": job_definition,
            "containerOverrides": overrides,
            "tags": {SWEEP_TAG: sweep_id},
        }
        if run.array_size is not None:
            request["arrayProperties"] = {"size": run.array_size}
        requests.append(request)
    return requests


def masked(request: dict) -> dict:
    """The request as it may be shown: the W&B key's value replaced by ***."""
    request = copy.deepcopy(request)
    for variable in request.get("containerOverrides", {}).get("environment", []):
        if variable["name"] == SECRET_ENV:
            variable["value"] = MASK
    return request


def show(call: str, request: dict):
    print(f"batch.{call} {json.dumps(masked(request))}", flush=True)


def wandb_key_to_send(cli: Cli, runs: list[Run]) -> str | None:
    """The key to pass as an environment override: only without a secret ARN, and only when a run uses --track."""
    tracked = [run for run in runs if has_flag(run.container_command, "--track")]
    if not tracked or cli.wandb_key_secret_arn is not None:
        return None
    key = os.environ.get(SECRET_ENV)
    if key:
        return key
    if all(run.environment.get("WANDB_MODE") in ("offline", "disabled") for run in tracked):
        return None
    raise InputError(
        f"{tracked[0].job_name} uses --track but there is no W&B key: give --wandb-key-secret-arn ARN (see cloud/README.md) "
        f"or set {SECRET_ENV} in your environment"
    )


# ---------------------------------------------------------------- talking to AWS


class AwsError(RuntimeError):
    """An AWS call failed: one line, exit code 1."""


def aws_call(client, call: str, key: str | None, **request):
    import botocore.exceptions

    try:
        return getattr(client, call)(**request)
    except botocore.exceptions.NoCredentialsError:
        raise AwsError("no AWS credentials: run `aws configure` (or `aws sso login`), or set AWS_PROFILE") from None
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        message = " ".join(str(e).split())
        if key:
            message = message.replace(key, MASK)
        raise AwsError(f"AWS Batch {call} failed: {message}") from None


def check_queue(client, cli: Cli, region: str, key: str | None):
    queues = aws_call(client, "describe_job_queues", key, jobQueues=[cli.job_queue])["jobQueues"]
    fix = (
        "create it with the Terraform in cloud/ (see cloud/README.md), or pass an existing one with --job-queue "
        f"(aws batch describe-job-queues --region {region})"
    )
    if not queues:
        raise InputError(f"--job-queue {cli.job_queue}: no such job queue in region {region}: {fix}")
    queue = queues[0]
    if queue.get("state") != "ENABLED" or queue.get("status") not in (None, "VALID", "UPDATING"):
        raise InputError(
            f"--job-queue {cli.job_queue} is {queue.get('state')} / {queue.get('status')} in region {region} "
            f"({queue.get('statusReason', 'no reason given')}): enable it (aws batch update-job-queue --job-queue "
            f"{cli.job_queue} --state ENABLED) or {fix}"
        )


def ensure_job_definition(client, request: dict, key: str | None) -> tuple[str, bool]:
    """The ARN of an ACTIVE revision with these properties (reused), or of a newly registered one."""
    digest = request["tags"][SPEC_TAG]
    matches, token = [], None
    while True:
        page_request = {"jobDefinitionName": request["jobDefinitionName"], "status": "ACTIVE"}
        if token:
            page_request["nextToken"] = token
        page = aws_call(client, "describe_job_definitions", key, **page_request)
        matches += [d for d in page["jobDefinitions"] if (d.get("tags") or {}).get(SPEC_TAG) == digest]
        token = page.get("nextToken")
        if not token:
            break
    if matches:
        return max(matches, key=lambda d: d["revision"])["jobDefinitionArn"], True
    return aws_call(client, "register_job_definition", key, **request)["jobDefinitionArn"], False


def submit(cli: Cli):
    try:
        validate(cli)
        sweep_id = cli.sweep_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        runs = plan_runs(cli, sweep_id)
        region = resolve_region(cli)
        key = wandb_key_to_send(cli, runs)
    except InputError as e:
        fail(str(e))
    definition = job_definition_request(cli)
    count = sum(run.array_size or 1 for run in runs)
    where = f"EFS {cli.efs_file_system_id} at {cli.storage_path}/{sweep_id}/<job name>"
    if key is not None:
        print(
            f"note: {SECRET_ENV} from your environment goes to each job as a plain environment override (shown as {MASK}); "
            "--wandb-key-secret-arn keeps it in Secrets Manager instead",
            file=sys.stderr,
        )

    if cli.dry_run:
        print(f"# dry run: nothing is sent. The AWS Batch requests for {count} runs in {region} (sweep {sweep_id}):")
        show("describe_job_queues", {"jobQueues": [cli.job_queue]})
        show("describe_job_definitions", {"jobDefinitionName": cli.job_name_prefix, "status": "ACTIVE"})
        print(f"# registered only when no ACTIVE revision is tagged {SPEC_TAG}={definition['tags'][SPEC_TAG]} (else reused):")
        show("register_job_definition", definition)
        print("# jobDefinition: the ARN of that revision")
        for request in submit_job_requests(cli, runs, sweep_id, cli.job_name_prefix, key):
            show("submit_job", request)
        print(f"# run folders: {where}")
        return

    try:
        import boto3
    except ImportError:
        fail("boto3 is not installed: uv sync --extra cloud (or pip install 'cleanrl[cloud]')")
    client = boto3.client("batch", region_name=region, endpoint_url=cli.endpoint_url)
    submitted = []
    try:
        check_queue(client, cli, region, key)
        arn, reused = ensure_job_definition(client, definition, key)
        print(f"{'reusing' if reused else 'registered'} job definition {arn}", flush=True)
        for request in submit_job_requests(cli, runs, sweep_id, arn, key):
            response = aws_call(client, "submit_job", key, **request)
            submitted.append(response["jobId"])
            size = f" (array of {request['arrayProperties']['size']})" if "arrayProperties" in request else ""
            print(f"submitted {request['jobName']}{size}: job id {response['jobId']}", flush=True)
    except InputError as e:
        fail(str(e))
    except AwsError as e:
        already = f" ({len(submitted)} of {len(runs)} jobs were submitted before it, listed above)" if submitted else ""
        fail(f"{e}{already}", code=1)
    print(
        f"{len(runs)} jobs ({count} runs) in job queue {cli.job_queue} ({region}), tagged {SWEEP_TAG}={sweep_id}; "
        f"run folders on {where}"
    )


# ---------------------------------------------------------------- inside the container


def checkpoints_under(folder: pathlib.Path) -> list[pathlib.Path]:
    """The latest checkpoint of each run under a folder (cleanrl_utils.run_state writes `checkpoint.pt`; the
    `checkpoint.prev.pt` beside it is the one before)."""
    return sorted(p for p in folder.rglob("checkpoint.pt") if p.is_file())


def run_in_container(spec: InContainer):
    """Start the run in its job folder, or continue it there from the checkpoint an earlier attempt left; the script
    replaces this process, so it receives the SIGTERM that AWS sends before it stops the container."""
    attempt = os.environ.get("AWS_BATCH_JOB_ATTEMPT", "1")
    if not spec.command:
        fail("--run-in-container: no script to run; submit_exp gives each job `-- cleanrl/<script>.py flags...`")
    script, *args = spec.command
    script_path = CLEANRL_SCRIPTS / pathlib.PurePosixPath(script).name
    if not script_path.is_file():
        fail(f"--run-in-container: {script} is not a script in {CLEANRL_SCRIPTS}")
    job_dir = spec.job_dir.absolute()
    if spec.seed_from_array_index is not None:
        index = os.environ.get("AWS_BATCH_JOB_ARRAY_INDEX")
        if index is None or not index.isdigit():
            fail(f"--seed-from-array-index needs AWS_BATCH_JOB_ARRAY_INDEX (set by AWS Batch in array jobs), got {index!r}")
        seed = spec.seed_from_array_index + int(index)
        args = [*args, "--seed", str(seed)]
        job_dir = job_dir / f"seed{seed}"
    job_dir.mkdir(parents=True, exist_ok=True)

    checkpoints = checkpoints_under(job_dir / "runs")
    if len(checkpoints) > 1:
        fail(f"{job_dir} holds several checkpoints ({', '.join(map(str, checkpoints))}): expected one run per job folder")
    if checkpoints:
        run_dir = checkpoints[0].parent.relative_to(job_dir)
        # the checkpoint holds the run's arguments; --resume alone continues it to its --total-timesteps
        argv = [str(script_path), "--resume", str(run_dir)]
        print(f"attempt {attempt}: resuming {job_dir / run_dir} from its checkpoint", flush=True)
    else:
        stale = [job_dir / name for name in ("runs", "videos") if (job_dir / name).exists()]
        if stale:
            print(
                f"attempt {attempt}: {job_dir} holds no checkpoint (an earlier attempt stopped before its first one): "
                f"removing {', '.join(map(str, stale))} and starting over",
                flush=True,
            )
            for folder in stale:
                shutil.rmtree(folder)
        argv = [str(script_path), *args]
        print(f"attempt {attempt}: starting python {shlex.join(argv)} in {job_dir}", flush=True)

    # the working directory moves to the job folder: keep modules next to the old one importable (`module:Env-v0` ids)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    os.chdir(job_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv], environment)


def main():
    if sys.argv[1:2] == ["--run-in-container"]:
        run_in_container(
            tyro.cli(InContainer, args=sys.argv[2:], prog="python -m cleanrl_utils.submit_exp --run-in-container")
        )
    else:
        submit(tyro.cli(Cli))


if __name__ == "__main__":
    main()
