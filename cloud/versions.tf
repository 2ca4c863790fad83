terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 6.x: aws_batch_compute_environment takes `name`, aws_batch_job_queue takes `compute_environment_order` blocks
      version = "~> 6.0"
    }
  }
}
