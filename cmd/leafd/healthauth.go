package main

import (
	"crypto/tls"
	"net/http"
	"strconv"
)

// healthClient is how `leafd health` reaches an admin port that requires a token or TLS
// (issue #14): it reads them from the environment the server reads (LEAFD_HTTP_AUTH[_FILE],
// else LEAFD_REQUIREPASS[_FILE]; LEAFD_HTTP_TLS), so the image's HEALTHCHECK works with the
// same settings as the server. Over TLS it probes its own process on loopback, so the
// certificate (issued for the service's name) is not verified.
func healthClient(getenv func(string) string) (token, scheme string, client *http.Client, err error) {
	c := Config{
		HTTPAuth: getenv("LEAFD_HTTP_AUTH"), HTTPAuthFile: getenv("LEAFD_HTTP_AUTH_FILE"),
		RequirePass: getenv("LEAFD_REQUIREPASS"), RequirePassFile: getenv("LEAFD_REQUIREPASS_FILE"),
	}
	if err := c.readSecrets(); err != nil {
		return "", "", nil, err
	}
	scheme, client = "http", http.DefaultClient
	if on, _ := strconv.ParseBool(getenv("LEAFD_HTTP_TLS")); on {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // probing our own process
		}}
	}
	return c.httpToken(), scheme, client, nil
}
