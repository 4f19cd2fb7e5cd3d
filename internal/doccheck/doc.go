// Package doccheck holds the tests that keep the documents true to each
// other: every relative link and anchor of README.md, the top-level
// documents and docs/ leads somewhere, and the README lists every page of
// docs/.
package doccheck
