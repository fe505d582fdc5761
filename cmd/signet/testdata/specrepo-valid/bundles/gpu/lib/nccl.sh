#!/bin/sh
echo nccl all-reduce
