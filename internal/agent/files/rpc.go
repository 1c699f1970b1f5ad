package files

import (
	"context"
	"errors"
	"os"
	"path"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

// Stat describes a path without following a final symlink.
func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	var e *pb.EntryInfo
	err = u.AsFS(func() (err error) {
		e, err = entryInfo(p)
		return err
	})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// ListDir lists a directory (a symlink to one is followed) and, for depth > 1,
// its subdirectories down to depth levels, in lexical depth-first order.
// Symlinked subdirectories are listed but not descended into; subdirectories
// the user cannot read are listed but not descended into.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	var entries []*pb.EntryInfo
	err = u.AsFS(func() error {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return pathErr("list", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return invalidf("list %s: not a directory", p)
		}
		var walk func(dir string, level int, top bool) error
		walk = func(dir string, level int, top bool) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				if top {
					return pathErr("list", dir, err)
				}
				return nil
			}
			for _, de := range ents {
				child := path.Join(dir, de.Name())
				var st unix.Stat_t
				if err := unix.Lstat(child, &st); err != nil {
					continue // removed meanwhile
				}
				entries = append(entries, entryFromStat(child, &st))
				if level < depth && st.Mode&unix.S_IFMT == unix.S_IFDIR {
					if err := walk(child, level+1, false); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return walk(p, 1, true)
	})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

// MakeDir creates a directory and its parents, owned by the acting user. An
// existing directory is already_exists; an existing non-directory is
// invalid_argument.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	var e *pb.EntryInfo
	err = u.AsFS(func() error {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return pathErr("mkdir", p, os.ErrExist)
			}
			return invalidf("mkdir %s: path exists and is not a directory", p)
		}
		if _, err := mkdirAll(p, 0o755); err != nil {
			return err
		}
		var err error
		e, err = entryInfo(p)
		return err
	})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination (rename(2) semantics: an existing file
// is replaced, an existing empty directory too), creating the destination's
// parents. Across filesystems it copies, then removes the source.
func (s *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetSource() == "" || req.Msg.GetDestination() == "" {
		return nil, rpcError(invalidf("source and destination are required"))
	}
	src := s.resolve(u, req.Msg.GetSource())
	dst := s.resolve(u, req.Msg.GetDestination())
	var e *pb.EntryInfo
	err = u.AsFS(func() error {
		var st unix.Stat_t
		if err := unix.Lstat(src, &st); err != nil {
			return pathErr("move", src, err)
		}
		if src == dst {
			var err error
			e, err = entryInfo(dst)
			return err
		}
		created, err := mkdirAll(path.Dir(dst), 0o755)
		if err != nil {
			return err
		}
		err = unix.Rename(src, dst)
		if errors.Is(err, unix.EXDEV) {
			err = moveAcross(src, dst)
		} else if err != nil {
			err = pathErr("move "+src+" to", dst, err)
		}
		if err != nil {
			removeDirs(created)
			return err
		}
		e, err = entryInfo(dst)
		return err
	})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// moveAcross moves src to dst on another filesystem: copy to a temporary
// name next to dst, rename it over dst, remove src.
func moveAcross(src, dst string) error {
	tmp := tempName(dst)
	if err := copyTree(src, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := unix.Rename(tmp, dst); err != nil {
		os.RemoveAll(tmp)
		return pathErr("move "+src+" to", dst, err)
	}
	if err := os.RemoveAll(src); err != nil {
		return pathErr("remove", src, err)
	}
	return nil
}

// Remove removes a path, recursively for a directory. A final symlink is
// removed, not followed. A path that does not exist is no error, as on
// envd (os.RemoveAll): the path is gone either way. A path the user may not
// look at is still an error (permission_denied).
func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	err = u.AsFS(func() error {
		err := os.RemoveAll(p)
		if errors.Is(err, unix.ENOTDIR) {
			// A component is not a directory: the path does not exist.
			err = nil
		}
		if err != nil {
			return pathErr("remove", p, err)
		}
		return nil
	})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}
