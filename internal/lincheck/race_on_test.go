//go:build race

package lincheck

const raceOn = true
