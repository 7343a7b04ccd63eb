"""Suite-wide settings: tiny tensors run fastest on one thread (and CI has two cores to share with subprocesses)."""

import torch

torch.set_num_threads(1)
