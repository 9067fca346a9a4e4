//go:build !linux || !gnet

package resp

import (
	"errors"
	"net"
)

// ModelGnet names the gnet/v2 variant (gnet_linux.go), which this binary was built without:
// it needs Linux and -tags gnet. NewServer refuses the model here.
const ModelGnet = "gnet"

const gnetSupported = false

// GnetAvailable reports whether this binary has the gnet variant (ModelGnet).
func GnetAvailable() bool { return gnetSupported }

type gnetEngine struct{}

func (s *Server) startGnet() error {
	return errors.New("resp: built without the gnet variant (go build -tags gnet, Linux)")
}
func (s *Server) enrollGnet(*Conn, net.Conn) bool { return false }
func (s *Server) gnetOffloads() int64             { return 0 }
