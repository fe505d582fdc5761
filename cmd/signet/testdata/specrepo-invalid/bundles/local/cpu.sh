#!/bin/sh
nproc --all
