// Package image imports OCI and Docker container images into overlayfs
// layer directories.
//
// Images are opened from a registry ([FromRegistry]), an OCI image layout
// directory ([FromLayout]), an OCI layout packed in a tar file
// ([FromOCIArchive]) or a "docker save" tarball ([FromDockerArchive]); [Detect]
// tells the on-disk kinds apart. [Import] then streams every layer of an image
// through [ApplyLayer] into a [LayerStore], verifying that the uncompressed
// content hashes to the layer's DiffID, and returns the layer stack together
// with the runtime configuration of the image ([ImageConfig]).
//
// Each layer becomes one directory that is usable as an overlayfs lower
// layer of a mount made with the "userxattr" option (as done inside the
// sandbox user namespace): whiteouts are character devices 0/0 and opaque
// directories carry the user.overlay.opaque=y extended attribute.
//
// Image content is untrusted. [ApplyLayer] never creates, modifies or links
// anything outside the target directory: every path is resolved beneath the
// layer directory without following symbolic links (openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS), entries that try
// to escape are refused with an error wrapping [ErrUnsafeEntry], device nodes
// are never created (except whiteouts), and images cannot forge overlayfs
// metadata (user.overlay.* extended attributes are dropped).
//
// Registry names come from API callers, so pulls go through a [Policy]:
// registries on internal addresses (loopback, link-local, private, the host's
// own) are refused unless an administrator lists them, on every request,
// redirect and token realm and again on the address each connection is made
// to; plain HTTP only for listed registries; errors never quote a registry's
// response. The Policy's [Limits] bound each import (uncompressed bytes,
// entries, expansion ratio, compressed download), counted as the layers
// stream in.
package image
