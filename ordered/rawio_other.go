//go:build !linux

package ordered

import "net"

// rawIO is the plain connection where raw system calls are not used.
type rawIO struct{ nc net.Conn }

func newRawIO(nc net.Conn) *rawIO { return &rawIO{nc: nc} }

func (r *rawIO) Read(p []byte) (int, error) { return r.nc.Read(p) }

func (r *rawIO) writeAll(b []byte) error {
	_, err := r.nc.Write(b)
	return err
}
