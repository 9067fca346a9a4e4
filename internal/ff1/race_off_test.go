//go:build !race

package ff1

const raceOn = false
