# syntax=docker/dockerfile:1
# The neuron.aws.com DRA kubelet plugin: `neuron-dra run` on every Neuron node.
#
#   docker build -t <registry>/neuron-dra:<version> .
#   scripts/install-dra-driver.sh <registry>/neuron-dra:<version>
#
# The release's image is not this one: scripts/build-image.sh makes it from Debian's
# packages with mmdebstrap, as an OCI archive, without Docker or a registry (the
# release workflow and the real-node tests run it). This file is for a build with
# Docker; for a reproducible one, name the base image by digest, as a tag can be moved:
#
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> -t ... .
#
# (`docker buildx imagetools inspect python:3.11-slim` prints the digest.)

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY requirements ./requirements
COPY pyproject.toml README.md LICENSE ./
COPY api ./api
COPY consts ./consts
COPY neuron_dra ./neuron_dra
# pip and setuptools from the lock, by hash; the project's wheel built with them (no
# build isolation: no build tool fetched unpinned); then binary wheels of the locked
# runtime dependencies of the agent and of the offline CLI (the `cli` extra, which
# `run` never imports; not `kubernetes`, which only kubeconfigs with exec plugins
# need), each checked against its hash: the final stage installs from this
# directory alone, so it needs no index, no compiler and no build backend.
RUN pip install --no-cache-dir --require-hashes -r requirements/build.txt \
 && pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
 && pip download --no-cache-dir --require-hashes --only-binary=:all: --dest /wheels \
        -r requirements/image.txt \
 && cp requirements/image.txt /wheels/

FROM ${PYTHON_IMAGE}
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels \
        --require-hashes -r /wheels/image.txt \
 && pip install --no-cache-dir --no-index --find-links /wheels /wheels/neuron_dra-*.whl \
 && pip uninstall --yes setuptools wheel
# Root, without capabilities (the DaemonSet drops them all): the kubelet's
# plugin directories and /var/run/cdi on the host are owned by root with mode
# 0750/0755, and sysfs files such as core_count are 0400 root. As UID 0 the
# plugin owns them and needs no capability; any other UID would need
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, which is more power, not less.
USER 0:0
ENTRYPOINT ["neuron-dra", "run"]
