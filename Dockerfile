# ZeroBoard for NVIDIA machines.
#   docker build -t zeroboard .
#   docker run --gpus all -p 7860:7860 -e ZEROBOARD_PASSWORD=change-me -v zeroboard-data:/data zeroboard
# The base image brings a CUDA build of PyTorch and nvcc (DeepSpeed compiles its CUDA ops with it).
FROM pytorch/pytorch:2.9.1-cuda12.8-cudnn9-devel

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends make g++ git && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/zeroboard
COPY . .
# Same install as the README's `make run`, with the image's own PyTorch instead of a pinned wheel.
RUN make install PY=python3 VENV=/opt/venv VENV_FLAGS=--system-site-packages TORCH=torch EXTRAS=[gpu]
ENV PATH=/opt/venv/bin:$PATH

# Pre-build DeepSpeed's CPU Adam (offload) and fused Adam. Arch names with a suffix ("9.0a")
# break DeepSpeed's op builder, so the list is given plainly here.
ENV TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0"
RUN python -c "from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder; CPUAdamBuilder().load(); FusedAdamBuilder().load()" \
    || echo "DeepSpeed ops will be compiled on first use"

# Runs, generated DeepSpeed presets and the demo model live on a volume.
VOLUME /data
WORKDIR /data
ENV ZEROBOARD_CACHE=/data/cache
EXPOSE 7860
CMD ["sh", "-c", "cp -rn /opt/zeroboard/examples /data/ 2>/dev/null; zeroboard webui --host 0.0.0.0 --port 7860"]
