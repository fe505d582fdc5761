#!/bin/sh
nproc
