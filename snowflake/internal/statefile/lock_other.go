//go:build !unix

package statefile

import (
	"errors"
	"os"
)

func lockFile(*os.File) error {
	return errors.New("file locking is only implemented on unix")
}

func incarnation(string, *os.File) string { return "" }
