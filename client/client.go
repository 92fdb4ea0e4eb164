package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/pkg/discovery"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/transmeta"
	"github.com/cloudwego/kitex/transport"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// ServiceName is the Kitex service name of combo-service (CONTRACT.md §1).
const ServiceName = "combo-service"

// Defaults NewClient applies before the caller's own options, which win.
const (
	DefaultClientRPCTimeout     = time.Second
	DefaultClientConnectTimeout = 200 * time.Millisecond
)

// ComboError codes (CONTRACT.md §1).
const (
	// CodeInvalidArgument: the request can never succeed as sent; do not retry.
	CodeInvalidArgument int32 = 1
	// CodeUnavailable: a dependency is down; retrying later may succeed.
	CodeUnavailable int32 = 2
	// CodeInternal: an unexpected server failure.
	CodeInternal int32 = 3
)

// NewClient builds a Kitex client for combo-service talking to hostPorts
// ("host:port" over TCP), with an RPC timeout of DefaultClientRPCTimeout
// and a connect timeout of DefaultClientConnectTimeout. A host name is
// looked up at each dial, so one not in DNS yet when the client is built
// works once it is; an entry that is no host:port with a numeric port is
// refused with an error naming it. A name with several addresses (a
// headless Kubernetes service, docker compose replicas) has each new
// connection dialed to one of them at random, each tried with a share of
// the connect timeout, so that a replica dropping packets no longer takes
// all of every dial's. Calls go over pooled connections, though: a replica
// added to the name later takes calls only as connections are dialed again,
// not at once (see "Replicas behind one name" in the package comment). opts
// are applied after these defaults, so a caller's client.WithRPCTimeout (or
// any other option) overrides them (a kclient.WithDialer of its own also
// replaces the dialer that looks names up at each dial and spreads over
// their addresses), with one exception: Kitex ORs transport
// protocols together, so TTHeader framing stays on (Framed alone still
// gives TTHeaderFramed, and PurePayload, unframed, is refused by the
// service, which takes framed requests only). A caller that must speak
// without TTHeader builds its client with comboservice.NewClient and
// transport.Framed. The returned client satisfies BatchSender.
//
// The 1 s timeout suits reports. A MergeLatest near its 10000-row bound
// with long strings (tens of MB) can take most of it on a busy replica, and
// a timeout is not an answer that the request was wrong: a caller sending
// pages that large gives those calls their own callopt.WithRPCTimeout.
func NewClient(hostPorts []string, opts ...kclient.Option) (comboservice.Client, error) {
	if len(hostPorts) == 0 {
		return nil, errors.New("combo client: NewClient needs at least one host:port")
	}
	resolver, err := staticResolver(hostPorts)
	if err != nil {
		return nil, err
	}
	all := make([]kclient.Option, 0, 10+len(opts))
	// spreadDialer (dial.go) dials a name's addresses in random order,
	// sharing the connect timeout among them. A caller's own WithDialer
	// replaces it: see setsOnceOption.
	if dialer := kclient.WithDialer(spreadDialer{}); !setsOnceOption(opts, dialer) {
		all = append(all, dialer)
	}
	all = append(all,
		kclient.WithResolver(resolver),
		kclient.WithRPCTimeout(DefaultClientRPCTimeout),
		kclient.WithConnectTimeout(DefaultClientConnectTimeout),
		// Kitex keeps 10 idle connections per address by default: a caller
		// with more calls in flight would redial on every call. 64 covers a
		// busy activityService replica; pass WithLongConnection to change it.
		kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: 64, MaxIdleGlobal: 1024, MaxIdleTimeout: time.Minute}),
		// TTHeader framing carries the server's "close this connection"
		// mark: a stopping replica sets it on every answer, Kitex's own
		// TTHeader handler reads it, and the pool then drops the
		// connection instead of sending the next call down it, so retries
		// reach a replica that is still up. The handler also sends the
		// caller's name (kclient.WithClientBasicInfo): without it the
		// header carries none, and the service counts every RPC of this
		// client as caller="unknown" in kitex_server_throughput, however
		// it is named.
		kclient.WithTransportProtocol(transport.TTHeaderFramed),
		kclient.WithMetaHandler(transmeta.ClientTTHeaderHandler),
	)
	all = append(all, opts...)
	return comboservice.NewClient(ServiceName, all...)
}

// setsOnceOption reports whether opts hold an option Kitex would take
// for a second opt: one whose function has the same name, which is how
// Kitex tells options apart. Kitex panics when an option it takes once,
// WithDialer among them, is set twice. In a build without inlining (dlv's,
// -gcflags=all=-l) every WithDialer option's function is named
// "github.com/cloudwego/kitex/client.WithDialer.func1", so a caller's own
// WithDialer would make NewClient panic unless NewClient leaves its own
// out; with inlining each is named after the place it was built, Kitex
// takes both, and the caller's, applied later, wins.
func setsOnceOption(opts []kclient.Option, opt kclient.Option) bool {
	name := funcName(opt.F)
	for _, o := range opts {
		if o.F != nil && funcName(o.F) == name {
			return true
		}
	}
	return false
}

func funcName(f any) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}

// staticResolver is the fixed list of TCP addresses hostPorts, each
// "host:port" with a numeric port. Kitex's own WithHostPorts resolves each
// host once, when the client is built, and takes one that does not resolve
// then for a Unix socket path: a service name not yet in DNS when the
// caller starts (a pod not ready yet, a DNS hiccup) or an address missing
// its port made a client that could never reach combo-service, with no
// error. combo-service listens on TCP only; a host here is looked up at
// each dial, so a name that resolves later works then.
func staticResolver(hostPorts []string) (discovery.Resolver, error) {
	ins := make([]discovery.Instance, len(hostPorts))
	for i, hp := range hostPorts {
		host, port, err := net.SplitHostPort(hp)
		if err == nil {
			if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || n == 0 {
				err = fmt.Errorf("port must be 1..65535, got %q", port)
			} else if strings.ContainsFunc(host, unicode.IsSpace) {
				// A list "a:8888, b:8888" split on "," leaves " b:8888":
				// no lookup ever resolves " b", so that replica would take
				// no call, with no error but each dial's.
				err = fmt.Errorf("host must not contain spaces, got %q", host)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("combo client: NewClient hostPorts[%d] must be host:port, got %q: %w", i, hp, err)
		}
		ins[i] = discovery.NewInstance("tcp", hp, discovery.DefaultWeight, nil)
	}
	targets := strings.Join(hostPorts, ",")
	// Kitex shares one balancer factory, resolver included, among the
	// clients of a process whose resolvers have the same name: named
	// targets alone, as WithHostPorts names its own, a client of these
	// addresses built with WithHostPorts while the name did not resolve
	// (a Unix socket path) would lend this one its resolver.
	name := "combo-client tcp " + targets
	return &discovery.SynthesizedResolver{
		ResolveFunc: func(context.Context, string) (discovery.Result, error) {
			return discovery.Result{Cacheable: true, CacheKey: "fixed", Instances: ins}, nil
		},
		NameFunc:   func() string { return name },
		TargetFunc: func(context.Context, rpcinfo.EndpointInfo) string { return targets },
	}, nil
}

// IsComboError reports whether err is, or wraps, the ComboError exception
// combo-service declares on every method, and returns it.
func IsComboError(err error) (*combo.ComboError, bool) {
	var ce *combo.ComboError
	if errors.As(err, &ce) && ce != nil {
		return ce, true
	}
	return nil, false
}
