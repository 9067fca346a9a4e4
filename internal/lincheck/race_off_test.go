//go:build !race

package lincheck

const raceOn = false
