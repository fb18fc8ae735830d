# syntax=docker/dockerfile:1
# The neuron.aws.com DRA kubelet plugin: `neuron-dra run` on every Neuron node.
#
#   docker build -t <registry>/neuron-dra:<version> .
#   scripts/install-dra-driver.sh <registry>/neuron-dra:<version>
#
# Without Docker or a registry, scripts/build-image.sh makes the same image from
# Debian's packages as an OCI archive (the real-node tests run it).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY api ./api
COPY consts ./consts
COPY neuron_dra ./neuron_dra
# The project's wheel, then binary wheels of exactly the pinned runtime
# dependencies of the agent (not the `tools` extra, which `run` never
# imports): the final stage installs from this directory alone, so it needs no
# index, no compiler and no build backend.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip wheel --no-cache-dir --only-binary=:all: --constraint constraints.txt \
        --wheel-dir /wheels /wheels/neuron_dra-*.whl

FROM ${PYTHON_IMAGE}
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    pip install --no-cache-dir --no-index --find-links /wheels \
        --constraint /tmp/constraints.txt neuron-dra \
 && pip uninstall --yes setuptools wheel
# Root, without capabilities (the DaemonSet drops them all): the kubelet's
# plugin directories and /var/run/cdi on the host are owned by root with mode
# 0750/0755, and sysfs files such as core_count are 0400 root. As UID 0 the
# plugin owns them and needs no capability; any other UID would need
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, which is more power, not less.
USER 0:0
ENTRYPOINT ["neuron-dra", "run"]
