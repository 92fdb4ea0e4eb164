package rpcserver

import (
	"net"
	"sync"

	"github.com/cloudwego/netpoll"
)

// Listener is ln as the server should be given it (server.WithListener):
// netpoll's listener over it, closed once however often it is asked.
//
// netpoll v0.7.2 serves a net.Listener on a duplicate of its descriptor,
// and its Close closes that number each time it is called; Kitex calls it
// twice on every stop, 100 ms apart. By the second call the number may be
// another file's (a connection to Redis or to the metrics port opened
// during the drain), which was then closed under its owner.
func Listener(ln net.Listener) (netpoll.Listener, error) {
	nl, err := netpoll.ConvertListener(ln)
	if err != nil {
		return nil, err
	}
	return &closeOnce{Listener: nl}, nil
}

type closeOnce struct {
	netpoll.Listener
	once sync.Once
	err  error
}

func (l *closeOnce) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}
