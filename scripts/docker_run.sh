#!/usr/bin/env bash
# Run the pipeline on a config inside the Vitis AI image, with this repository mounted at /workspace.
#
# Usage: scripts/docker_run.sh CONFIG.yaml [more arguments for `python -m pipeline run`]
#   The config must lie inside the repository (it is read through the mount). Example:
#   scripts/docker_run.sh configs/digits_sim_zcu102.yaml --set quantizer.backend=nndct
#
# Environment:
#   VITIS_PIPELINE_IMAGE  image to run (default vitis-pipeline:latest); built from docker/Dockerfile
#                         the first time if it is missing.
#   VITIS_AI_IMAGE        base image for that build (default xilinx/vitis-ai-pytorch-cpu:latest).
#   DOCKER                docker client to call (default docker).
set -euo pipefail

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
}

if [ "$#" -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    usage
    exit 2
fi

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG="$1"
shift
if [ ! -f "$CONFIG" ]; then
    echo "docker_run.sh: config $CONFIG does not exist" >&2
    exit 2
fi
CONFIG_ABS="$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")"
case "$CONFIG_ABS" in
    "$REPO"/*) CONFIG_REL="${CONFIG_ABS#"$REPO"/}" ;;
    *)
        echo "docker_run.sh: config $CONFIG_ABS is outside the repository $REPO, which is the only folder" \
             "mounted in the container; copy it into the repository" >&2
        exit 2
        ;;
esac

DOCKER="${DOCKER:-docker}"
IMAGE="${VITIS_PIPELINE_IMAGE:-vitis-pipeline:latest}"
BASE="${VITIS_AI_IMAGE:-xilinx/vitis-ai-pytorch-cpu:latest}"

if ! "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "docker_run.sh: building $IMAGE on $BASE (once)" >&2
    DOCKER_BUILDKIT=1 "$DOCKER" build -f "$REPO/docker/Dockerfile" --build-arg "VITIS_AI_IMAGE=$BASE" \
        -t "$IMAGE" "$REPO"
fi

RUN_ARGS=(run --rm -v "$REPO:/workspace" -w /workspace -e HOME=/tmp --user "$(id -u):$(id -g)")
if [ -t 0 ] && [ -t 1 ]; then
    RUN_ARGS+=(-it)
fi
case "$IMAGE" in
    *gpu*) RUN_ARGS+=(--gpus all) ;;
esac

# shellcheck disable=SC2016  # $0 and $@ are expanded by the container's bash, not here
exec "$DOCKER" "${RUN_ARGS[@]}" "$IMAGE" bash -c \
    'source /opt/vitis_ai/conda/etc/profile.d/conda.sh && conda activate vitis-ai-pytorch && exec python -m pipeline run --config "$0" "$@"' \
    "$CONFIG_REL" "$@"
