package main

import (
	"errors"
	"flag"
	"regexp"
	"slices"
	"strings"
	"time"
)

// explainParseErrors makes every duration and integer flag of fs say, when
// a value does not parse, what it expects, as the byte-size flags do:
// `invalid value "30" for flag -shutdown-timeout: want a duration such as
// 30s, 1m30s or 500ms` rather than the flag package's "parse error". It
// wraps the flags after they are registered, so flags added later get it
// too. restore puts the original values back, which the flag package's
// usage needs to name each flag's type and default.
func explainParseErrors(fs *flag.FlagSet) (restore func()) {
	orig := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		var want string
		switch g.Get().(type) {
		case time.Duration:
			want = "want a duration such as 30s, 1m30s or 500ms (a number needs a unit: ns, us, ms, s, m or h)"
		case int, int64:
			want = "want a whole number such as 1024"
		case uint, uint64:
			want = "want a whole number, 0 or more, such as 1024"
		default:
			return // bool flags keep their value type: flag.Parse checks IsBoolFlag
		}
		orig[f] = f.Value
		f.Value = explainedValue{Getter: g, want: want}
	})
	return func() {
		for f, v := range orig {
			f.Value = v
		}
	}
}

// explainedValue is a flag value whose parse errors say what it wants.
type explainedValue struct {
	flag.Getter
	want string
}

func (v explainedValue) Set(s string) error {
	if err := v.Getter.Set(s); err != nil {
		return errors.New(v.want)
	}
	return nil
}

// serviceLink matches the variables Kubernetes injects for a Service named
// rolloutd in the pod's namespace (ROLLOUTD_SERVICE_HOST,
// ROLLOUTD_SERVICE_PORT_GRPC, ROLLOUTD_PORT_50051_TCP_ADDR, ...). They are
// not settings; the Deployment turns them off (enableServiceLinks: false),
// and a pod that still gets them is not warned about them.
var serviceLink = regexp.MustCompile(`^ROLLOUTD_(SERVICE_HOST|SERVICE_PORT(_.*)?|PORT(_.*)?)$`)

// envAddr is the gRPC address of rolloutd admin (--addr) and rolloutd
// export (--server), read when the flag is not given. It is a setting of
// the client commands, not of serve: serve knows it (it warns only about
// names nothing reads) and ignores it.
const envAddr = envPrefix + "ADDR"

// clientEnvVars are the ROLLOUTD_* variables the client commands read.
var clientEnvVars = []string{envAddr}

// unknownEnvVars returns the names of the ROLLOUTD_* variables of environ
// (KEY=VALUE entries, as os.Environ gives them) that name none of flags:
// a misspelled ROLLOUTD_MAX_WRITER would otherwise be ignored in silence.
// Values are never returned: a variable may hold a secret.
func unknownEnvVars(environ, flags []string) []string {
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		flagName, ok := strings.CutPrefix(name, envPrefix)
		if !ok || serviceLink.MatchString(name) || slices.Contains(clientEnvVars, name) {
			continue
		}
		if !slices.Contains(flags, strings.ToLower(strings.ReplaceAll(flagName, "_", "-"))) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return slices.Compact(unknown)
}
