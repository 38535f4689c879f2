package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/morph-dev/morph/internal/heapfloor"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// The environment variables of Katalog deployments (spec 000), read as the defaults of
// the matching flags; a flag given on the command line wins, and an empty variable counts
// as unset.
const (
	envAdmission  = "ENABLE_ADMISSION_WEBHOOK" // --admission
	envConversion = "ENABLE_CONVERSION"        // --conversion
	envTLSCert    = "TLS_CERT"                 // --tls-cert
	envTLSKey     = "TLS_KEY"                  // --tls-key
)

type serveOptions struct {
	policies       string
	contexts       []string
	addr           string
	certDir        string
	tlsCert        string
	tlsKey         string
	dnsNames       []string
	admission      bool
	conversion     bool
	http2          bool
	maxBody        string
	reloadInterval time.Duration
	requestTimeout time.Duration
	reader         policy.Reader // bounded by --max-input
	shutdownGrace  time.Duration
	logFormat      string
	logLevel       string
	heapFloor      string
	cluster        clusterOptions

	// admissionSet and conversionSet are the settings as the user gave them, such as
	// "--conversion=false" or "ENABLE_CONVERSION=false", for errors that name them;
	// empty when the default applies.
	admissionSet  string
	conversionSet string
}

// newServeCommand builds "morph serve". Logs go to stderr; the command prints nothing on
// stdout.
func newServeCommand(newLoader func(*objects.Store) *policy.Loader, newClusterLoader func(*objects.Store, clusterReaders) *policy.Loader, _, stderr io.Writer) *cobra.Command {
	o := &serveOptions{}
	o.cluster.newLoader = newClusterLoader
	cmd := &cobra.Command{
		Use:   "serve --policies DIR (--cert-dir DIR | --tls-cert FILE --tls-key FILE)",
		Short: "Serve policies as admission and CRD conversion webhooks over HTTPS",
		Long: `Serve the policies of a folder as Kubernetes webhooks over HTTPS:

  POST /mutate    mutating admission (AdmissionReview admission.k8s.io/v1)
  POST /validate  validating admission (Katalog validation rules)
  POST /convert   CRD conversion (ConversionReview apiextensions.k8s.io/v1)
  GET  /healthz, /readyz, /metrics, /katalog/<entry>

The folder is polled every --reload-interval; a change reloads every policy at once.
A folder that does not load keeps the last good policies (the error is logged,
counted in morph_policy_reloads_total and shown by /readyz). When the first load
fails the server still starts, unready, until the folder loads.

Cluster mode: with --kubeconfig FILE (or in a Pod, without --policies) the policies
are the cluster's Gatekeeper mutators, Kyverno MutatingPolicies and Katalogs (CRDs:
morph generate crds), read with informers and compiled again within a second of a
change; a policy that does not compile is left out and its status says why
(condition Ready). MutatingAdmissionPolicies are left to kube-apiserver. See
docs/cluster.md.

Certificates: --tls-cert and --tls-key name a pair, reloaded when the files change.
--cert-dir DIR uses DIR/tls.crt and DIR/tls.key the same way; when they are missing,
morph generates a CA and a certificate for the --addr host and every --dns-name,
writes ca.crt, tls.crt and tls.key (0600) there, and logs the path of ca.crt, the
caBundle of the webhook configurations (see morph generate webhooks).

Environment (Katalog deployments; a flag given on the command line wins, and an
empty variable counts as unset):
  ENABLE_ADMISSION_WEBHOOK  --admission   serve /mutate and /validate (default: as --conversion)
  ENABLE_CONVERSION         --conversion  serve /convert (default true)
  TLS_CERT, TLS_KEY         --tls-cert, --tls-key (ignored when --cert-dir is given)
As in Katalog deployments, admission requires conversion. Unless --admission or
ENABLE_ADMISSION_WEBHOOK sets it, admission follows conversion: ENABLE_CONVERSION=false
alone turns both off, reported as nothing to serve. Only admission set to true with
conversion off is Katalog's "ENABLE_ADMISSION_WEBHOOK requires ENABLE_CONVERSION".

Garbage collection: the heap may grow to --gc-heap-floor (64Mi) before the collector
runs, instead of Go's 4 MiB, which at 1,000 requests a second would collect about 30
times a second and slow the requests each collection overlaps. Above the floor GOGC
paces as usual; GOMEMLIMIT, when set, caps the heap before the floor does.

SIGTERM or SIGINT stop accepting connections; requests in flight finish (up to
--shutdown-grace) and morph exits 0.`,
		Example: `  morph serve --policies policies/ --cert-dir /tmp/morph-certs
  morph serve --policies /etc/morph/policies --context namespaces.yaml \
    --addr 0.0.0.0:8443 --tls-cert /certs/tls.crt --tls-key /certs/tls.key --log-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.fromEnvironment(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			rd, err := inputReader(cmd)
			if err != nil {
				return err
			}
			o.reader = rd
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
			defer stop()
			return o.run(ctx, newLoader, stderr)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// addFlags registers the flags of "morph serve" in f, bound to o.
func (o *serveOptions) addFlags(f *pflag.FlagSet) {
	f.StringVarP(&o.policies, "policies", "p", "", "folder (or file) of policies to serve, polled for changes")
	f.StringSliceVar(&o.contexts, "context", nil, "objects that exist in the cluster: Namespaces, CRDs, params (repeatable)")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8443", "address to listen on")
	f.StringVar(&o.certDir, "cert-dir", "", "folder of tls.crt and tls.key; generated (with ca.crt) when missing")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serving certificate file (env "+envTLSCert+")")
	f.StringVar(&o.tlsKey, "tls-key", "", "serving key file (env "+envTLSKey+")")
	f.StringSliceVar(&o.dnsNames, "dns-name", nil, "extra DNS name of a generated certificate, e.g. morph.morph-system.svc (repeatable)")
	f.BoolVar(&o.admission, "admission", true, "serve /mutate and /validate (env "+envAdmission+"; when unset, as --conversion)")
	f.BoolVar(&o.conversion, "conversion", true, "serve /convert (env "+envConversion+")")
	f.BoolVar(&o.http2, "http2", false, "enable HTTP/2 (off by default: CVE-2023-44487)")
	f.StringVar(&o.maxBody, "max-body", "7Mi", "largest request body accepted (bytes, or a quantity such as 7Mi)")
	f.DurationVar(&o.reloadInterval, "reload-interval", webhook.DefaultReloadInterval, "how often the policy folder is checked for changes")
	f.DurationVar(&o.requestTimeout, "request-timeout", webhook.DefaultRequestTimeout, "deadline of a request that carries no ?timeout=")
	f.DurationVar(&o.shutdownGrace, "shutdown-grace", webhook.DefaultShutdownGrace, "how long in-flight requests may take to finish on shutdown")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug (one line per request), info, warn or error")
	o.cluster.addFlags(f)
	f.StringVar(&o.heapFloor, "gc-heap-floor", resource.NewQuantity(heapfloor.DefaultSize, resource.BinarySI).String(), "heap size below which the garbage collector does not run (a quantity; 0 leaves Go's pacing alone; GOMEMLIMIT still caps it)")
}

// fromEnvironment fills the options the command line left unset from the environment.
// An empty variable counts as unset. Admission, when neither --admission nor
// ENABLE_ADMISSION_WEBHOOK sets it, follows conversion, which it requires. With
// --cert-dir on the command line, TLS_CERT and TLS_KEY are not applied: the flag wins.
func (o *serveOptions) fromEnvironment(flags *pflag.FlagSet, lookup func(string) (string, bool)) error {
	for _, b := range []struct {
		env, flag string
		dst       *bool
		set       *string
	}{{envAdmission, "admission", &o.admission, &o.admissionSet}, {envConversion, "conversion", &o.conversion, &o.conversionSet}} {
		if flags.Changed(b.flag) {
			*b.set = fmt.Sprintf("--%s=%t", b.flag, *b.dst)
			continue
		}
		v, _ := lookup(b.env)
		if strings.TrimSpace(v) == "" {
			continue
		}
		parsed, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return usagef("%s=%q is not a boolean — set %s=true or %s=false", b.env, v, b.env, b.env)
		}
		*b.dst, *b.set = parsed, fmt.Sprintf("%s=%t", b.env, parsed)
	}
	if o.admissionSet == "" {
		o.admission = o.conversion
	}
	if flags.Changed("cert-dir") && o.certDir != "" {
		return nil
	}
	for _, s := range []struct {
		env, flag string
		dst       *string
	}{{envTLSCert, "tls-cert", &o.tlsCert}, {envTLSKey, "tls-key", &o.tlsKey}} {
		if v, ok := lookup(s.env); ok && v != "" && !flags.Changed(s.flag) {
			*s.dst = v
		}
	}
	return nil
}

// check rejects impossible combinations, in the words of Katalog's error reference
// where it has them.
func (o *serveOptions) check() error {
	switch {
	case o.policies == "" && !o.clusterMode():
		return usagef("--policies is required: give the folder of policies to serve, or --kubeconfig FILE to serve the cluster's")
	case o.clusterMode() && o.policies == "" && len(o.contexts) > 0:
		return usagef("--context is for --policies: in cluster mode the context objects come from the API server")
	case !o.admission && !o.conversion && o.admissionSet == "":
		return usagef("nothing to serve: %s turns off /convert, and with it /mutate and /validate, as admission requires conversion — %s",
			o.conversionSetting(), o.conversionFix())
	case !o.admission && !o.conversion:
		return usagef("nothing to serve: %s and %s turn off every webhook — %s (admission requires conversion)",
			o.admissionSet, o.conversionSetting(), o.conversionFix())
	case o.admission && !o.conversion:
		// Only when admission was set: unset, it follows conversion (fromEnvironment).
		return usagef("%s requires %s — %s", envAdmission, envConversion, o.conversionFix())
	case o.certDir != "" && (o.tlsCert != "" || o.tlsKey != ""):
		// TLS_CERT and TLS_KEY are not applied with --cert-dir: these are flags.
		return usagef("--cert-dir excludes --tls-cert and --tls-key — give --cert-dir DIR, or --tls-cert FILE and --tls-key FILE")
	case o.tlsCert != "" && o.tlsKey == "":
		return usagef("%s requires %s — set %s (or --tls-key) to the key of %s", envTLSCert, envTLSKey, envTLSKey, envTLSCert)
	case o.tlsKey != "" && o.tlsCert == "":
		return usagef("%s requires %s — set %s (or --tls-cert) to the certificate of %s", envTLSKey, envTLSCert, envTLSCert, envTLSKey)
	case o.tlsCert == "" && o.certDir == "" && !o.clusterMode():
		return usagef("%s is required — set %s and %s (--tls-cert, --tls-key), or give --cert-dir DIR to use or generate a certificate there", envTLSCert, envTLSCert, envTLSKey)
	case o.shutdownGrace <= 0:
		return usagef("--shutdown-grace must be positive")
	case o.reloadInterval <= 0:
		return usagef("--reload-interval must be positive")
	}
	return nil
}

// conversionSetting names the setting that turned conversion off.
func (o *serveOptions) conversionSetting() string {
	if o.conversionSet == "" {
		return "--conversion=false"
	}
	return o.conversionSet
}

// conversionFix says how to turn conversion on where it was turned off: Katalog's
// "set ENABLE_CONVERSION=true", unless the command line turned it off, which wins
// over the environment.
func (o *serveOptions) conversionFix() string {
	if strings.HasPrefix(o.conversionSetting(), "--") {
		return "give --conversion=true instead of " + o.conversionSetting()
	}
	return "set " + envConversion + "=true"
}

func (o *serveOptions) maxBodyBytes() (int64, error) {
	q, err := resource.ParseQuantity(o.maxBody)
	if err != nil || q.Value() <= 0 {
		return 0, usagef("--max-body %q is not a positive size: use bytes or a quantity such as 7Mi", o.maxBody)
	}
	return q.Value(), nil
}

func (o *serveOptions) heapFloorBytes() (uint64, error) {
	q, err := resource.ParseQuantity(o.heapFloor)
	if err != nil || q.Sign() < 0 {
		return 0, usagef("--gc-heap-floor %q is not a size: use bytes or a quantity such as 64Mi, or 0 to turn the floor off", o.heapFloor)
	}
	return uint64(q.Value()), nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: use text or json", format)
}

func (o *serveOptions) run(ctx context.Context, newLoader func(*objects.Store) *policy.Loader, stderr io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.requestTimeout <= 0 {
		return usagef("--request-timeout %s is not a positive duration: use one such as 10s", o.requestTimeout)
	}
	maxBody, err := o.maxBodyBytes()
	if err != nil {
		return err
	}
	heapFloor, err := o.heapFloorBytes()
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	floorCtx, stopFloor := context.WithCancel(ctx)
	floorDone := make(chan struct{})
	go func() { heapfloor.Keep(floorCtx, heapFloor, log); close(floorDone) }()
	defer func() { stopFloor(); <-floorDone }()
	if o.clusterMode() {
		return o.runCluster(ctx, newLoader, log, maxBody)
	}
	certFile, keyFile := o.tlsCert, o.tlsKey
	if o.certDir != "" {
		hosts, err := webhook.CertificateHosts(o.addr, o.dnsNames)
		if err != nil {
			return usageError{err}
		}
		generated, err := webhook.EnsureCertificates(o.certDir, hosts, time.Now())
		if err != nil {
			return err
		}
		certFile, keyFile = filepath.Join(o.certDir, webhook.CertFile), filepath.Join(o.certDir, webhook.KeyFile)
		if generated {
			log.Info("generated a CA and a serving certificate; use ca.crt as the caBundle",
				"caBundle", filepath.Join(o.certDir, webhook.CAFile), "hosts", strings.Join(hosts, ","))
		}
		// Renew a generated certificate while serving; the server reloads the files.
		go func() {
			tick := time.NewTicker(time.Hour)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if renewed, err := webhook.RenewCertificates(o.certDir, hosts, time.Now()); err != nil {
						log.Error("renewing the serving certificate", "error", err)
					} else if renewed {
						log.Info("renewed the serving certificate", "dir", o.certDir)
					}
				}
			}
		}()
	}
	certs, err := webhook.LoadCertificates(certFile, keyFile)
	if err != nil {
		return err
	}
	server, err := webhook.New(webhook.Options{
		Source:         &webhook.FolderSource{Policies: o.policies, Context: o.contexts, NewLoader: newLoader, Reader: o.reader},
		Admission:      o.admission,
		Conversion:     o.conversion,
		MaxBody:        maxBody,
		RequestTimeout: o.requestTimeout,
		Logger:         log,
	})
	if err != nil {
		return err
	}
	err = server.ListenAndServe(ctx, o.addr, webhook.ServeOptions{
		TLS:            server.TLSConfig(certs),
		HTTP2:          o.http2,
		ReloadInterval: o.reloadInterval,
		ShutdownGrace:  o.shutdownGrace,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("morph serve: %w", err)
	}
	return nil
}
