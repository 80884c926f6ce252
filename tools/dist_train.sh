#!/usr/bin/env bash
# Multi-GPU training with torchrun: one process per GPU, DDP through Lightning.
#
#   tools/dist_train.sh CONFIG GPUS [tools/train.py arguments]
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 tools/dist_train.sh CONFIG 8 --work-dir work_dirs/run   # node 0
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 tools/dist_train.sh CONFIG 8 --work-dir work_dirs/run   # node 1
#
# batch_size in the config is per GPU; the total batch is batch_size x GPUS x NNODES. The LRs in
# the configs are for the total batch stated in each config; scale them linearly with it.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 CONFIG GPUS [tools/train.py arguments]" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
PORT=${PORT:-29500}
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)

exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" --master_port="$PORT" \
    --nproc_per_node="$GPUS" \
    "$HERE/train.py" "$CONFIG" --devices "$GPUS" --num-nodes "$NNODES" --strategy ddp "$@"
