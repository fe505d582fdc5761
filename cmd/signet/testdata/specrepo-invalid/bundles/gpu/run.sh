#!/bin/sh
# Reports the GPUs this node has.
exec nvidia-smi -L
