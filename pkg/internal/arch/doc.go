// Package arch holds the tests of the packages' shape: which may import
// which, and which may write what.
package arch
