"""Telling whether a torch device is one this machine has (``cpu``, ``cuda``, ``cuda:1``, ``mps``)."""

from s2forecast.user_errors import UserError


def check_device(text: str) -> str:
    """``text`` when this machine has that device.

    Raises:
        UserError: not a device, or a CUDA device (index) or MPS this machine lacks; the message
            starts with the device, for the caller to name the option.
    """
    import torch

    try:
        parsed = torch.device(text)
    except (RuntimeError, TypeError):
        raise UserError(f"{text!r} is not a device; use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"{text!r}: this machine has no CUDA device; use cpu")
        if parsed.index is not None and parsed.index >= count:
            raise UserError(f"{text!r}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{text!r}: MPS is not available here; use cpu")
    return text
