"""The simulator's NVML: a native ``libnvidia-ml.so.1`` stand-in and the per-node files it reads.

NVIDIA's mock NVML (Go module ``github.com/NVIDIA/k8s-test-infra``, ``pkg/gpu/mocknvml``) is not
served by the Go module proxy, so, as ARCHITECTURE.md section 3 allows, this package builds the
closest stand-in: ``mocknvml.c`` (package data, plain C over libc) compiles into a
``libnvidia-ml.so.1`` that nvidia-ml-py loads exactly as it loads the real library, through
``LD_LIBRARY_PATH``. It answers the calls the plugin makes (init/shutdown, driver and CUDA
versions, device enumeration, UUID, name, PCI, memory, architecture, compute capability and the
fabric-info calls) from one config file per simulated node, named by the environment variable
``MOCK_NVML_CONFIG`` (the name NVIDIA's mock uses). It is not NVIDIA's library and shares no code
with it.

Modules:

- ``config``: the typed node description (``NodeNvmlConfig``, ``GpuSpec``, ``FabricInfo``), the
  renderer of the file format the C library parses, and the environment a process needs.
- ``profiles``: ready-made nodes (GB200 MNNVL, H200 single-node NVLink, fabric still forming,
  fabric failed, no fabric) with UUIDs derived deterministically from (rack, node, gpu).
- ``build``: ``build_library`` compiles the C source into a folder, reusing an up-to-date build.

Production code never imports this package; it only ever sees the library through nvidia-ml-py.
"""
