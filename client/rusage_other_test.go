//go:build !linux

package client

const rusageThread = 0 // RUSAGE_SELF: the whole process where there is no per-thread figure
