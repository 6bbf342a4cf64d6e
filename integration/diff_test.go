//go:build !slow

package integration
