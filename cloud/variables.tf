variable "region" {
  description = "AWS region for everything (the queue, EFS, ECR, the secret)."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Name (and prefix) of every resource: the job queue is called this, the GPU queue \"<name>-gpu\"."
  type        = string
  default     = "cleanrl"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{0,31}$", var.name))
    error_message = "Use up to 32 lowercase letters, digits, '-' and '_' (ECR repository names must be lowercase)."
  }
}

variable "vpc_id" {
  description = "The VPC the instances and the EFS mount targets go in (e.g. the default VPC: aws ec2 describe-vpcs --filters Name=is-default,Values=true)."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets for the instances, at most one per availability zone (EFS gets a mount target in each). They need outbound internet (public subnets that assign public IPs, or private ones behind a NAT) to pull the image and reach W&B."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0
    error_message = "Give at least one subnet."
  }
}

variable "instance_types" {
  description = "Instance types or families for CPU jobs (x86_64: the image is built for linux/amd64). Batch picks among them for each job's vCPU / memory."
  type        = list(string)
  default     = ["c6i", "m6i", "c6a", "m6a", "c5", "m5"]
}

variable "max_vcpus" {
  description = "Most vCPUs the CPU compute environment runs at once (caps the spend: e.g. 256 = 128 two-vCPU jobs)."
  type        = number
  default     = 256
}

variable "min_vcpus" {
  description = "vCPUs kept running while the queue is empty. 0: no instance (and no cost) when idle."
  type        = number
  default     = 0
}

variable "gpu_instance_types" {
  description = "Instance types for the GPU queue \"<name>-gpu\" (jobs submitted with --num-gpu >= 1); [] creates no GPU queue."
  type        = list(string)
  default     = ["g4dn"]
}

variable "gpu_max_vcpus" {
  description = "Most vCPUs the GPU compute environment runs at once."
  type        = number
  default     = 64
}

variable "spot_bid_percentage" {
  description = "Highest spot price to pay, in percent of the on-demand price."
  type        = number
  default     = 100
}
