// Package cli is the gateway's command line: the role (no argument),
// "migrate", and the commands that check a deployment and make what a
// test of it needs (smoke, token, access-codes). cmd/gateway hands off to
// Main, as each role's binary hands off to its cli package.
// Configuration: FLASHSALE_* variables (docs/CONFIGURATION.md).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/smoke"
)

type config struct {
	app.Common
	gateway.Config
	// SmokeURL and SmokeTimeout configure "gateway smoke".
	SmokeURL string `envconfig:"FLASHSALE_SMOKE_URL" default:"http://127.0.0.1:8080"`
	// SmokeAdminURL is the admin API's base URL (FLASHSALE_ADMIN_ADDR);
	// default SmokeURL.
	SmokeAdminURL string        `envconfig:"FLASHSALE_SMOKE_ADMIN_URL"`
	SmokeTimeout  time.Duration `envconfig:"FLASHSALE_SMOKE_TIMEOUT" default:"60s"`
	// RedisPoolSize bounds Redis connections (0: go-redis default, 10 per CPU).
	RedisPoolSize int `envconfig:"FLASHSALE_REDIS_POOL_SIZE" default:"0"`
}

func (c *config) Base() app.Common { return c.Common }

// SetDefaults fills the role's defaults (see app.Main); a variable's 0
// that means off becomes the Config's off.
func (c *config) SetDefaults() {
	c.Config.ZeroIsOff()
	c.Config.SetDefaults()
}

// Validate refuses wrong values before anything is dialled (see app.Main).
func (c *config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	switch {
	case c.RedisPoolSize < 0:
		return fmt.Errorf("FLASHSALE_REDIS_POOL_SIZE must not be negative, got %d", c.RedisPoolSize)
	case c.SmokeTimeout <= 0:
		return fmt.Errorf("FLASHSALE_SMOKE_TIMEOUT must be positive, got %s", c.SmokeTimeout)
	}
	return c.Config.Validate()
}

// Main runs the gateway's command line (app.Main).
func Main() {
	app.Main(&config{}, run, app.Command[*config]{Name: "smoke", Task: "Checks", NArgs: 0, Run: runSmoke, Check: checkSmoke,
		Summary: "check a deployment end to end: create a one-unit voucher, claim it, wait for the order (the chart's helm test). " +
			"FLASHSALE_SMOKE_URL, FLASHSALE_SMOKE_ADMIN_URL and FLASHSALE_SMOKE_TIMEOUT say where and how long; " +
			"FLASHSALE_ADMIN_TOKEN, FLASHSALE_JWT_SECRET, FLASHSALE_JWT_ISSUER and FLASHSALE_JWT_AUDIENCE are the release's. " +
			"Without FLASHSALE_JWT_SECRET (users' tokens from an identity provider's key set) it cannot sign a user's token: " +
			"it says so and exits 0 without checking. It cleans up: the test order is cancelled and the test voucher paused."},
		tokenCommand(), accessCodesCommand())
}

// accessCodesCommand is "gateway access-codes --voucher V [--in FILE]":
// the access codes of the users read from FILE (or stdin), one a line, as
// "user,code" lines on stdout.
func accessCodesCommand() app.Command[*config] {
	var voucher int64
	in := "-"
	return app.Command[*config]{Name: "access-codes", Task: "Checks", NArgs: 0,
		Summary: "print the access codes of a voucher for the users read one a line from --in (default stdin), as user,code lines; " +
			"made with FLASHSALE_ACCESS_KEY, or the key derived from FLASHSALE_ADMIN_TOKEN: the gateways' key. Nothing is stored, " +
			"and the voucher is not looked up: check its id",
		Flags: func(fs *flag.FlagSet) {
			fs.Int64Var(&voucher, "voucher", 0, "the `VOUCHER_ID` the codes are for (required)")
			fs.StringVar(&in, "in", "-", "the `FILE` of user ids, one a line; - for stdin")
		},
		Check: func(c *config) error {
			if c.AccessKey == "" && c.AdminToken == "" {
				return errors.New("FLASHSALE_ACCESS_KEY or FLASHSALE_ADMIN_TOKEN is required: the codes are made with the gateways' key")
			}
			if c.AccessKey != "" && len(c.AccessKey) < 32 {
				return errors.New("FLASHSALE_ACCESS_KEY must be at least 32 bytes")
			}
			return nil
		},
		Run: func(_ context.Context, cfg *config, _ *app.Runtime, _ []string) error {
			if voucher < 1 {
				return errors.New("--voucher is required: the id of the voucher the codes are for")
			}
			r := io.Reader(os.Stdin)
			if in != "-" {
				f, err := os.Open(in)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			n, err := gateway.WriteAccessCodes(&cfg.Config, voucher, r, os.Stdout)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%d codes for voucher %d\n", n, voucher)
			return nil
		}}
}

// tokenCommand is "gateway token (--user U | --users FILE) [--ttl D]": a
// user's bearer token signed with FLASHSALE_JWT_SECRET (and its issuer
// and audience), for trying the API by hand; or one "user,token" line for
// each user of FILE, streamed, for a load test's many users.
func tokenCommand() app.Command[*config] {
	var user, users string
	ttl := app.Duration(time.Hour)
	return app.Command[*config]{Name: "token", Task: "Checks", NArgs: 0,
		Summary: "print a user's bearer token, signed with FLASHSALE_JWT_SECRET (with FLASHSALE_JWT_ISSUER and _AUDIENCE when set), to try the API by hand; " +
			"with --users, a user,token line for each user read one a line from FILE",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&user, "user", "", "the `USER` id (sub): 1-64 characters of A-Z a-z 0-9 _ . @ - (this or --users)")
			fs.StringVar(&users, "users", "", "the `FILE` of user ids, one a line (- for stdin): a user,token line each")
			fs.Var(&ttl, "ttl", "how long the token lives, a `DURATION` (at most FLASHSALE_JWT_MAX_LIFETIME)")
		},
		Check: func(c *config) error {
			if len(c.JWTSecret) < 32 {
				return errors.New("FLASHSALE_JWT_SECRET (at least 32 bytes) is required: the token is signed with it")
			}
			return nil
		},
		Run: func(_ context.Context, cfg *config, _ *app.Runtime, _ []string) error {
			if (user == "") == (users == "") {
				return errors.New("one of --user and --users is required")
			}
			if time.Duration(ttl) <= 0 || time.Duration(ttl) > cfg.JWTMaxLifetime {
				return fmt.Errorf("--ttl must be positive and at most FLASHSALE_JWT_MAX_LIFETIME (%s)", cfg.JWTMaxLifetime)
			}
			exp := time.Now().Add(time.Duration(ttl))
			if users != "" {
				r := io.Reader(os.Stdin)
				if users != "-" {
					f, err := os.Open(users)
					if err != nil {
						return err
					}
					defer f.Close()
					r = f
				}
				n, err := gateway.WriteUserLines(r, os.Stdout, func(b []byte, u string) ([]byte, error) {
					tok, err := gateway.SignUserTokenFor(cfg.JWTSecret, u, cfg.JWTIssuer, cfg.JWTAudience, exp)
					return append(b, tok...), err
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "%d tokens\n", n)
				return nil
			}
			tok, err := gateway.SignUserTokenFor(cfg.JWTSecret, user, cfg.JWTIssuer, cfg.JWTAudience, exp)
			if err != nil {
				return err
			}
			fmt.Println(tok)
			return nil
		}}
}

// checkSmoke is what the smoke test needs of the configuration: less than
// the gateway (no store, and no JWT secret, see runSmoke).
func checkSmoke(c *config) error {
	switch {
	case c.AdminToken == "":
		return errors.New("FLASHSALE_ADMIN_TOKEN is required")
	case c.SmokeTimeout <= 0:
		return fmt.Errorf("FLASHSALE_SMOKE_TIMEOUT must be positive, got %s", c.SmokeTimeout)
	}
	return nil
}

// runSmoke checks the deployment at FLASHSALE_SMOKE_URL end to end (the
// chart's helm test).
func runSmoke(ctx context.Context, cfg *config, _ *app.Runtime, _ []string) error {
	if cfg.JWTSecret == "" {
		fmt.Println("skipped: no FLASHSALE_JWT_SECRET, so no user token can be signed here (users' tokens come from an identity provider's key set); check a sale with a token of yours instead")
		return nil
	}
	return smoke.Run(ctx, smoke.Config{URL: cfg.SmokeURL, AdminURL: cfg.SmokeAdminURL, Timeout: cfg.SmokeTimeout,
		Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience}, cfg.AdminToken, cfg.JWTSecret, os.Stdout)
}

func run(ctx context.Context, cfg *config, rt *app.Runtime) error {
	return rt.Serve(ctx, cfg.Common, func(ctx context.Context, ready *app.Readiness) error {
		redis, mysql, closeAll, err := cfg.Connect(ctx, rt.Log, cfg.RedisPoolSize)
		if err != nil {
			return err
		}
		defer closeAll()
		// Admissions go on connections that wait for a late reply as long
		// as a claim's outcome is listened for (FLASHSALE_CLAIM_OUTCOME_TIMEOUT).
		admitClient, err := cfg.AdmitClient(cfg.RedisPoolSize, cfg.ClaimOutcomeTimeout)
		if err != nil {
			return err
		}
		defer admitClient.Close()
		cfg.Config.Tracing = cfg.TracingEnabled()
		gw, err := gateway.New(cfg.Config, redis, mysql, rt.Log, gateway.WithRegistry(rt.Registry), gateway.WithAdmitClient(admitClient))
		if err != nil {
			return err
		}
		ready.Set(app.Ready(redis, mysql))
		return gw.Run(ctx)
	})
}
