# Starts the R driver, whose source is $1, with Rscript (site and user
# profiles are read, as IRkernel's R reads them; the workspace is neither
# restored nor saved).
if ! command -v Rscript >/dev/null 2>&1; then
  printf '{"type":"unavailable","value":"R is not installed in this sandbox (Debian'"'"'s r-base-core provides it)"}\n' >&4
  exit 127
fi
export WARDEN_R_DRIVER="$1"
exec Rscript --no-save --no-restore -e 'eval(parse(text = Sys.getenv("WARDEN_R_DRIVER"), keep.source = FALSE))'
