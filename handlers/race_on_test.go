//go:build race

package handlers

// raceOn: the race detector is on (sync.Pool then drops items at random, so pooled buffers
// allocate; allocation counts are measured without it).
const raceOn = true
