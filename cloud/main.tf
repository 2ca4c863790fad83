# AWS Batch for cleanrl sweeps (cleanrl_utils.submit_exp): a spot compute environment and its job queue (plus a GPU
# pair), the IAM roles they need, an ECR repository for the image the project's Dockerfile builds, an EFS file system
# that holds the run folders (so a job retried after a spot interruption resumes from its checkpoint), and a Secrets
# Manager secret for the W&B API key. The job definition is not here: submit_exp registers it (image, resources,
# retry strategy, the EFS volume and the secret reference) and reuses it while those stay the same.
# See cloud/README.md for how to stand it up and tear it down.

provider "aws" {
  region = var.region

  default_tags {
    tags = {
      Project   = var.name
      ManagedBy = "terraform"
    }
  }
}

data "aws_partition" "current" {}

locals {
  managed_policy = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
}

# ---------------------------------------------------------------- IAM

data "aws_iam_policy_document" "batch_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["batch.amazonaws.com"]
    }
  }
}

# lets AWS Batch launch and scale the instances of the managed compute environments
resource "aws_iam_role" "batch_service" {
  name               = "${var.name}-batch-service"
  assume_role_policy = data.aws_iam_policy_document.batch_assume.json
}

resource "aws_iam_role_policy_attachment" "batch_service" {
  role       = aws_iam_role.batch_service.name
  policy_arn = "${local.managed_policy}/service-role/AWSBatchServiceRole"
}

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

# the instances' role: join the ECS cluster, pull the image from ECR, write the job logs to CloudWatch
resource "aws_iam_role" "ecs_instance" {
  name               = "${var.name}-ecs-instance"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

resource "aws_iam_role_policy_attachment" "ecs_instance" {
  role       = aws_iam_role.ecs_instance.name
  policy_arn = "${local.managed_policy}/service-role/AmazonEC2ContainerServiceforEC2Role"
}

resource "aws_iam_instance_profile" "ecs_instance" {
  name = "${var.name}-ecs-instance"
  role = aws_iam_role.ecs_instance.name
}

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

# the task execution role (submit_exp --execution-role-arn): ECS uses it to read the W&B secret into the container
resource "aws_iam_role" "execution" {
  name               = "${var.name}-batch-execution"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "${local.managed_policy}/service-role/AmazonECSTaskExecutionRolePolicy"
}

data "aws_iam_policy_document" "read_wandb_secret" {
  statement {
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.wandb.arn]
  }
}

resource "aws_iam_role_policy" "execution_reads_wandb_secret" {
  name   = "read-wandb-secret"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.read_wandb_secret.json
}

# ---------------------------------------------------------------- network

resource "aws_security_group" "batch" {
  name        = "${var.name}-batch-instances"
  description = "cleanrl Batch instances: outbound only (ECR, CloudWatch, Secrets Manager, EFS, W&B)"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_egress_rule" "batch_all" {
  security_group_id = aws_security_group.batch.id
  description       = "everything out"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
}

resource "aws_security_group" "efs" {
  name        = "${var.name}-efs"
  description = "cleanrl run folders on EFS: NFS from the Batch instances only"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "efs_from_batch" {
  security_group_id            = aws_security_group.efs.id
  description                  = "NFS from the Batch instances"
  referenced_security_group_id = aws_security_group.batch.id
  ip_protocol                  = "tcp"
  from_port                    = 2049
  to_port                      = 2049
}

# ---------------------------------------------------------------- storage: run folders, image, W&B key

# every job's folder ({sweep id}/{job name}/runs/{run_name}) lives here; the job definition mounts it at /cleanrl/runs
resource "aws_efs_file_system" "runs" {
  creation_token   = "${var.name}-runs"
  encrypted        = true
  performance_mode = "generalPurpose"
  throughput_mode  = "bursting"

  # run folders nobody read for 30 days move to the cheaper Infrequent Access class
  lifecycle_policy {
    transition_to_ia = "AFTER_30_DAYS"
  }

  tags = {
    Name = "${var.name}-runs"
  }
}

resource "aws_efs_mount_target" "runs" {
  for_each = toset(var.subnet_ids)

  file_system_id  = aws_efs_file_system.runs.id
  subnet_id       = each.value
  security_groups = [aws_security_group.efs.id]
}

resource "aws_ecr_repository" "cleanrl" {
  name                 = var.name
  image_tag_mutability = "MUTABLE"
  # `terraform destroy` deletes the pushed images too
  force_delete = true

  image_scanning_configuration {
    scan_on_push = true
  }
}

# created empty: put the key in with `aws secretsmanager put-secret-value` (cloud/README.md), so it never enters the
# Terraform state
resource "aws_secretsmanager_secret" "wandb" {
  name        = "${var.name}/wandb-api-key"
  description = "W&B API key for cleanrl jobs (WANDB_API_KEY in the container)"
  # deleted at once on destroy, so that a later apply can create it again under the same name
  recovery_window_in_days = 0
}

# ---------------------------------------------------------------- compute environments and queues

resource "aws_batch_compute_environment" "spot" {
  name         = "${var.name}-spot"
  type         = "MANAGED"
  service_role = aws_iam_role.batch_service.arn

  compute_resources {
    type = "SPOT"
    # launch from the spot pools least likely to be interrupted; with this strategy no spot fleet role is needed
    allocation_strategy = "SPOT_CAPACITY_OPTIMIZED"
    bid_percentage      = var.spot_bid_percentage
    instance_type       = var.instance_types
    min_vcpus           = var.min_vcpus
    max_vcpus           = var.max_vcpus
    instance_role       = aws_iam_instance_profile.ecs_instance.arn
    security_group_ids  = [aws_security_group.batch.id]
    subnets             = var.subnet_ids

    ec2_configuration {
      image_type = "ECS_AL2023"
    }

    tags = {
      Name = "${var.name}-batch"
    }
  }

  lifecycle {
    # Batch scales desired vCPUs itself; Terraform must not reset them
    ignore_changes = [compute_resources[0].desired_vcpus]
  }

  # keep the service role's policy until the environment is gone, or its deletion gets stuck in DELETING
  depends_on = [aws_iam_role_policy_attachment.batch_service]
}

resource "aws_batch_job_queue" "cpu" {
  name     = var.name
  state    = "ENABLED"
  priority = 1

  compute_environment_order {
    order               = 1
    compute_environment = aws_batch_compute_environment.spot.arn
  }
}

resource "aws_batch_compute_environment" "gpu_spot" {
  count = length(var.gpu_instance_types) > 0 ? 1 : 0

  name         = "${var.name}-gpu-spot"
  type         = "MANAGED"
  service_role = aws_iam_role.batch_service.arn

  compute_resources {
    type                = "SPOT"
    allocation_strategy = "SPOT_CAPACITY_OPTIMIZED"
    bid_percentage      = var.spot_bid_percentage
    instance_type       = var.gpu_instance_types
    min_vcpus           = 0
    max_vcpus           = var.gpu_max_vcpus
    instance_role       = aws_iam_instance_profile.ecs_instance.arn
    security_group_ids  = [aws_security_group.batch.id]
    subnets             = var.subnet_ids

    # the ECS-optimized AMI with the NVIDIA driver and container toolkit
    ec2_configuration {
      image_type = "ECS_AL2023_NVIDIA"
    }

    tags = {
      Name = "${var.name}-batch-gpu"
    }
  }

  lifecycle {
    ignore_changes = [compute_resources[0].desired_vcpus]
  }

  depends_on = [aws_iam_role_policy_attachment.batch_service]
}

resource "aws_batch_job_queue" "gpu" {
  count = length(var.gpu_instance_types) > 0 ? 1 : 0

  name     = "${var.name}-gpu"
  state    = "ENABLED"
  priority = 1

  compute_environment_order {
    order               = 1
    compute_environment = aws_batch_compute_environment.gpu_spot[0].arn
  }
}
