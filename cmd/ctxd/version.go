package main

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and commit, when set at link time (make build does:
// -ldflags "-X main.version=v1.2.3 -X main.commit=..."), stand in for the
// module version and VCS revision of the build information, which a
// build from a source tree (not go install ...@version) may lack.
var version, commit string

// buildInfo returns the module version ("(devel)" when unknown), the VCS
// commit (shortened to 12 characters, "" when unknown) and whether the tree
// was modified.
func buildInfo() (v, rev string, modified bool) {
	v = version
	info, ok := debug.ReadBuildInfo()
	if v == "" {
		v = "(devel)"
		if ok && info.Main.Version != "" {
			v = info.Main.Version
		}
	}
	if !ok {
		return v, commit, false
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		rev = commit
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return v, rev, modified
}

// serviceVersion is the same version as semantic versioning wants it,
// for $SRV.INFO: "1.2.3", or "0.0.0-devel+COMMIT" for a build without a
// module version.
func serviceVersion() string {
	v, rev, modified := buildInfo()
	if sv := strings.TrimPrefix(v, "v"); semver.MatchString(sv) {
		return sv
	}
	sv := "0.0.0-devel"
	if rev != "" {
		sv += "+" + rev
		if modified {
			sv += ".modified"
		}
	}
	return sv
}

// semver is the regular expression semver.org suggests.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// buildVersion returns the module version and the VCS commit the binary
// was built from: "v1.2.3", "v1.2.3 (commit 0123abcd, modified)", or
// "(devel)" for a build from a source tree without VCS information.
func buildVersion() string {
	v, rev, modified := buildInfo()
	if rev != "" {
		v += " (commit " + rev
		if modified {
			v += ", modified"
		}
		v += ")"
	}
	return v
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "version", "Prints the version of ctxd: the module version and the commit it was built from.")
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(e, "version", pos); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "ctxd %s %s\n", buildVersion(), runtime.Version())
	return nil
}
