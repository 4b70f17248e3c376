# ZeroBoard for NVIDIA machines (docs/en/quickstart.md, "Docker or Podman").
#   docker build -t zeroboard .
#   docker run -d --name zeroboard --gpus all -p 7860:7860 -e ZEROBOARD_PASSWORD=change-me -v zeroboard-data:/data zeroboard
# The default base brings a CUDA build of PyTorch and nvcc (DeepSpeed compiles its CUDA ops with it). Everything
# after FROM works on any Debian-like base with Python 3.11+ (and its headers) and PyTorch (the container test builds
# it on Debian with the CPU build of PyTorch): --build-arg BASE_IMAGE=... picks another.
ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-devel
FROM ${BASE_IMAGE}
# [gpu] adds Liger's fused Triton kernels (1 GB with Triton); --build-arg EXTRAS= leaves them out on a CPU base.
ARG EXTRAS=[gpu]

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1
# tini as PID 1: it reaps the processes a finished job leaves to it and hands `docker stop` to the entrypoint.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends make g++ ccache git tini >/dev/null \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/zeroboard
# The build context is what .dockerignore lets through: the package, the example jobs, the install files.
COPY . .
# Same install as the README's `make run`, with the base image's own PyTorch instead of a pinned wheel.
RUN make install PY=python3 VENV=/opt/venv VENV_FLAGS=--system-site-packages TORCH=torch "EXTRAS=${EXTRAS}"
ENV PATH=/opt/venv/bin:$PATH

# DeepSpeed's ops for the base's PyTorch (CUDA or CPU build), compiled now so that the first job starts at once, into
# a folder of the image. Arch names with a suffix ("9.0a") break DeepSpeed's op builder: the list is given plainly.
# A failed op is reported here, op by op with its error, and the build goes on: a job that needs the op compiles it
# first, and the page shows that compile phase (and the error, if it fails again). CPU Adam is compiled for this
# machine's processor (-march=native): build the image where it runs.
# The C++ compiles go through ccache, whose store is a build cache of this machine (not a layer of the image): a
# rebuild after a change to ZeroBoard (or anything else of the context) takes each object compiled before from it,
# keyed by the compiler, its flags and every source and header, and compiles only what changed (BuildKit or buildah).
ENV TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0" TORCH_EXTENSIONS_DIR=/opt/torch-extensions
RUN --mount=type=cache,id=zeroboard-ccache,target=/var/cache/zeroboard-ccache \
    device=$(python3 -c "import torch; print('cuda' if torch.version.cuda else 'cpu')") \
    && CCACHE_DIR=/var/cache/zeroboard-ccache PATH=/usr/lib/ccache:$PATH zeroboard build-ops --device "$device" \
    || echo "ZeroBoard: DeepSpeed ops NOT pre-built (the error is above); a job that needs one compiles it first"

# Runs, the generated DeepSpeed presets, the demo model, the runs index and downloaded models live on the volume.
VOLUME /data
WORKDIR /data
ENV ZEROBOARD_CACHE=/data/cache HF_HOME=/data/huggingface
EXPOSE 7860
ENTRYPOINT ["tini", "--", "/opt/zeroboard/docker/entrypoint.sh"]
CMD ["zeroboard", "webui", "--host", "0.0.0.0", "--port", "7860"]
