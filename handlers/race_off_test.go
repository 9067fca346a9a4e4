//go:build !race

package handlers

const raceOn = false
