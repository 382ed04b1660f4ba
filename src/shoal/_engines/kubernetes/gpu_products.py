"""Which nodes carry an accelerator: defaults for well-known NVIDIA GPUs, then the settings.

NVIDIA's GPU feature discovery (part of the GPU operator) labels every GPU node with
``nvidia.com/gpu.product``: the product name ``nvidia-smi`` reports, spaces turned into dashes
(the k8s-device-plugin's ``internal/lm/resource.go`` builds it so). Those names are fixed per
board, so a cluster running the GPU operator needs no settings for the usual GPUs: the table
below maps Shoal's accelerator names (``gpu="H200:8"``) to them. ``KubeConfig.accelerators``
wins over it, for another board of the same GPU (``NVIDIA-H100-PCIe``) or another label
(``cloud.google.com/gke-accelerator``). A name in neither renders without a product selector
(any GPU node may take the pod) and says so once, rather than refusing the whole run.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

__all__ = ["GPU_PRODUCTS", "GPU_PRODUCT_LABEL", "accelerator_selector"]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# The SXM (8-GPU baseboard) part where a GPU ships in several boards: the one training nodes
# carry. Each value is nvidia-smi's product name with dashes for spaces, as found on
# GFD-labelled nodes in public manifests and docs: nodeSelector examples of the GPU operator's
# MIG guide (NVIDIA-A100-SXM4-40GB, NVIDIA-A100-SXM4-80GB and their -MIG-<profile> forms);
# `kubectl get nodes -l nvidia.com/gpu.product=...` runbooks (NVIDIA-H100-80GB-HBM3 on p5,
# NVIDIA-L40S on g6e, NVIDIA-L4 on g6, NVIDIA-A10G on g5); GPU profile tables of MIG tools that
# match GFD labels (NVIDIA-H200, NVIDIA-B200, Tesla-T4); node listings (NVIDIA-A10,
# Tesla-V100-SXM2-16GB: older boards keep nvidia-smi's "Tesla" prefix).
GPU_PRODUCTS: Mapping[str, str] = {
    "B200": "NVIDIA-B200",
    "H200": "NVIDIA-H200",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "A100": "NVIDIA-A100-SXM4-40GB",
    "A100-80G": "NVIDIA-A100-SXM4-80GB",
    "L40S": "NVIDIA-L40S",
    "L4": "NVIDIA-L4",
    "A10G": "NVIDIA-A10G",
    "A10": "NVIDIA-A10",
    "T4": "Tesla-T4",
    "V100": "Tesla-V100-SXM2-16GB",
}
# Under the GPU operator's single MIG strategy a node of slices is labelled with the board's
# product and the profile: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" for Shoal's "A100-MIG-1g.5gb".
_MIG = "-MIG-"

_WARNED: set[str] = set()  # accelerators already warned about in this process


def default_product(accelerator: str) -> str | None:
    """The ``nvidia.com/gpu.product`` value of a well-known accelerator (MIG slices too)."""
    if accelerator in GPU_PRODUCTS:
        return GPU_PRODUCTS[accelerator]
    gpu, mig, profile = accelerator.partition(_MIG)
    if mig and profile and gpu in GPU_PRODUCTS:
        return f"{GPU_PRODUCTS[gpu]}{_MIG}{profile}"
    return None


def accelerator_selector(accelerator: str, configured: Mapping[str, Mapping[str, str]],
                         env_name: str) -> dict[str, str]:
    """The node selector that puts ``accelerator`` pods on their GPUs: the settings' entry,
    else the well-known product, else none (with one warning per accelerator)."""
    if accelerator in configured:
        return dict(configured[accelerator])
    product = default_product(accelerator)
    if product is not None:
        return {GPU_PRODUCT_LABEL: product}
    if accelerator not in _WARNED:
        _WARNED.add(accelerator)
        known = ", ".join(sorted(configured)) or "none"
        warnings.warn(
            f"environment {env_name!r}: accelerator {accelerator!r} is not a GPU Shoal knows "
            f"the {GPU_PRODUCT_LABEL} label of, nor in KubeConfig.accelerators (configured: "
            f"{known}); its pods get no product selector and may land on any GPU node. Add "
            f"KubeConfig(accelerators={{{accelerator!r}: {{{GPU_PRODUCT_LABEL!r}: '...'}}}}) "
            "to pin them", stacklevel=4)
    return {}
