"""Running experiments: device choice and seeding (fitting, checkpoints, decoding
and metrics arrive with the sequence-to-sequence chapters)."""

from attncourse.train.runtime import describe_device, pick_device, seed_everything

__all__ = ["describe_device", "pick_device", "seed_everything"]
