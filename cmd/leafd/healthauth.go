package main

import (
	"crypto/tls"
	"net/http"
)

// healthClient is how `leafd health` reaches an admin port that requires a token or TLS: c
// holds the server's options as the server reads them (--http-auth[-file], else
// --requirepass[-file]; --http-tls), so the image's HEALTHCHECK works with the same settings
// as the server. Over TLS it probes its own process on loopback, so the certificate (issued
// for the service's name) is not verified.
func healthClient(c Config) (token, scheme string, client *http.Client) {
	scheme, client = "http", http.DefaultClient
	if c.HTTPTLS {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // probing our own process
		}}
	}
	return c.httpToken(), scheme, client
}
