output "region" {
  value = var.region
}

output "job_queue" {
  description = "the queue for CPU jobs (submit_exp --job-queue)"
  value       = aws_batch_job_queue.cpu.name
}

output "gpu_job_queue" {
  description = "the queue for jobs with --num-gpu >= 1 (null without gpu_instance_types)"
  value       = length(aws_batch_job_queue.gpu) > 0 ? aws_batch_job_queue.gpu[0].name : null
}

output "ecr_repository_url" {
  description = "push the image here; submit_exp --docker-tag <this>:<tag>"
  value       = aws_ecr_repository.cleanrl.repository_url
}

output "efs_file_system_id" {
  description = "the run folders' file system (submit_exp --efs-file-system-id)"
  value       = aws_efs_file_system.runs.id
}

output "execution_role_arn" {
  description = "the role that reads the W&B secret (submit_exp --execution-role-arn)"
  value       = aws_iam_role.execution.arn
}

output "wandb_secret_arn" {
  description = "put the W&B API key here (submit_exp --wandb-key-secret-arn)"
  value       = aws_secretsmanager_secret.wandb.arn
}

output "batch_security_group_id" {
  description = "the instances' security group (use it for an instance that mounts the EFS file system to copy runs out)"
  value       = aws_security_group.batch.id
}

output "submit_exp_flags" {
  description = "the flags that point cleanrl_utils.submit_exp at this infrastructure (add --docker-tag and the commands)"
  value = join(" ", [
    "--region", var.region,
    "--job-queue", aws_batch_job_queue.cpu.name,
    "--efs-file-system-id", aws_efs_file_system.runs.id,
  ])
}

output "wandb_flags" {
  description = "add these to submit_exp once the W&B key is in the secret: jobs then get it as WANDB_API_KEY"
  value = join(" ", [
    "--wandb-key-secret-arn", aws_secretsmanager_secret.wandb.arn,
    "--execution-role-arn", aws_iam_role.execution.arn,
  ])
}
