"""Forecasts from a checkpoint: the rollout of a ``Forecaster`` streamed to forecast files.

Imports no training code and no Lightning: a checkpoint forecasts with torch, the store reader
and the output policy only.
"""
