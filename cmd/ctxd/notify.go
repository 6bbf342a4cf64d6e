package main

import (
	"net"
	"strings"
)

// sdNotify tells systemd (Type=notify) the service's state, such as
// "READY=1" or "STOPPING=1", when it runs ctxd: it sets NOTIFY_SOCKET.
// Elsewhere it does nothing. Errors are returned for logging only: the
// service runs the same without systemd.
func sdNotify(e *env, state string) error {
	path := e.getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
