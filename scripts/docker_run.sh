#!/usr/bin/env bash
# Run the pipeline on a config inside the Vitis AI image, with this repository mounted at /workspace.
#
# Usage: scripts/docker_run.sh CONFIG.yaml [more arguments for `python -m pipeline run`]
#        scripts/docker_run.sh -h | --help
#   The config must lie inside the repository (it is read through the mount). Example:
#   scripts/docker_run.sh configs/digits_sim_zcu102.yaml --set quantizer.backend=nndct
#   Only this script needs docker: the sim backend and the written compile plan run without it
#   (python -m pipeline run --config CONFIG.yaml).
#
# Environment:
#   VITIS_PIPELINE_IMAGE  image to run (default vitis-pipeline:latest); built from docker/Dockerfile
#                         the first time if it is missing, with a plain `docker build` whose context
#                         is only pyproject.toml, README.md, pipeline/ and the Dockerfile.
#   VITIS_AI_IMAGE        base image for that build. Default: the pinned Vitis AI image for the
#                         config's compile.target (and --set compile.target=...), as
#                         `python -m pipeline targets` lists them, read with the host's python3 and
#                         only its standard library; without python3, docker/Dockerfile's default.
#   DOCKER                docker client to call (default docker).
#   DOCKER_BUILDKIT       passed through untouched: BuildKit (buildx) is not needed; set
#                         DOCKER_BUILDKIT=1 to build with it, 0 for the legacy builder.
set -euo pipefail

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

if [ "$#" -lt 1 ]; then
    usage >&2
    exit 2
fi
if [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    usage
    exit 0
fi

DOCKER="${DOCKER:-docker}"
if ! command -v "$DOCKER" >/dev/null 2>&1; then
    echo "docker_run.sh: this script needs the docker client, and '$DOCKER' is not on PATH (install docker or" \
         "set DOCKER=/path/to/docker); the rest of the pipeline runs without it:" \
         "python -m pipeline run --config CONFIG.yaml" >&2
    exit 2
fi
if ! DAEMON_ERR="$("$DOCKER" version --format '{{.Server.Version}}' 2>&1 >/dev/null)"; then
    echo "docker_run.sh: the docker client cannot reach a docker daemon (${DAEMON_ERR##*$'\n'}); start it or get" \
         "access to its socket; the rest of the pipeline runs without docker:" \
         "python -m pipeline run --config CONFIG.yaml" >&2
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

IMAGE="${VITIS_PIPELINE_IMAGE:-vitis-pipeline:latest}"
# The base image: the user's VITIS_AI_IMAGE, else the one the target registry names for the config's
# DPU target (pipeline/targets/docker_image.py prints it, and a note when the target compiles in an
# image the pipeline cannot run in), else the Dockerfile's default.
BASE="${VITIS_AI_IMAGE:-}"
if [ -z "$BASE" ] && command -v python3 >/dev/null 2>&1; then
    BASE="$(PYTHONPATH="$REPO" python3 -m pipeline.targets.docker_image "$CONFIG" "$@")" || BASE=""
fi
if [ -z "$BASE" ]; then
    BASE="$(sed -n 's/^ARG VITIS_AI_IMAGE=//p' "$REPO/docker/Dockerfile")"
    echo "docker_run.sh: could not read compile.target of $CONFIG with python3 (not on PATH, or it failed" \
         "above); using docker/Dockerfile's default image $BASE (set VITIS_AI_IMAGE to choose)" >&2
fi

if ! "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "docker_run.sh: building $IMAGE on $BASE (once)" >&2
    # The context is a tar stream of what the image installs: the legacy builder ignores
    # docker/Dockerfile.dockerignore and would otherwise send .venv, runs/ and data along.
    tar -C "$REPO" --exclude=__pycache__ -cf - pyproject.toml README.md pipeline docker/Dockerfile \
        | "$DOCKER" build -f docker/Dockerfile --build-arg "VITIS_AI_IMAGE=$BASE" -t "$IMAGE" -
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
