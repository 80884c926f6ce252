#!/usr/bin/env bash
# SLURM training job: one task per GPU on every node, DDP through Lightning, pre-emption safe.
#
#   sbatch tools/slurm_train.sh CONFIG WORK_DIR [tools/train.py arguments]
#   sbatch --nodes=4 --ntasks-per-node=8 --gpus-per-node=8 tools/slurm_train.sh CONFIG WORK_DIR
#
# SLURM sends SIGUSR1 120 s before the time limit (or on pre-emption); Lightning then writes
# WORK_DIR/hpc_ckpt_N.ckpt (atomically) and requeues the job. The requeued job runs this script
# again; --resume auto continues from the newest checkpoint (hpc or last.ckpt, data position
# included), or starts fresh on the first run. Tasks per node must equal GPUs per node.
#SBATCH --job-name=perception
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: sbatch $0 CONFIG WORK_DIR [tools/train.py arguments]" >&2
    exit 2
fi
CONFIG=$1
WORK_DIR=$2
shift 2
PYTHON=${PYTHON:-python}
export NO_ALBUMENTATIONS_UPDATE=1 HF_HUB_OFFLINE=1

srun --kill-on-bad-exit=1 "$PYTHON" -u tools/train.py "$CONFIG" --work-dir "$WORK_DIR" --resume auto \
    --devices "${SLURM_NTASKS_PER_NODE}" --num-nodes "${SLURM_JOB_NUM_NODES}" --strategy ddp "$@"
