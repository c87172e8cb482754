# bash completion for nextfs(1) and nextfs-fuse(1)         -*- shell-script -*-
#
# Installed as bash-completion/completions/nextfs, with nextfs-fuse a
# symlink to it; bash-completion loads it the first time either command
# is completed.  It also works sourced on its own, without bash-completion.
#
# The commands of nextfs, their options (which take a value, of what
# kind) and what each argument is - an image, a mount point, a snapshot
# name - come from nextfs's own command table ("nextfs __commands"), so a
# command added there completes without a change here, unless one of its
# arguments is of a new kind (_nextfs_complete_arg).  Snapshot names come
# from "nextfs snapshot list --names0 TARGET", which prints every name
# exactly (any byte but '/' and NUL), NUL-terminated.

# The snapshot names of TARGET (an image or a mount point), one per element
# of the array _nextfs_names.
_nextfs_snapshot_names()
{
	local target=$1
	_nextfs_names=()
	[[ $target == "~"* ]] && target=$HOME${target:1}
	[[ -e $target ]] || return 0
	mapfile -t -d '' _nextfs_names < <("${_nextfs_cmd:-nextfs}" snapshot \
		list --names0 "$target" 2>/dev/null)
}

# Dequote what was typed for the common cases (backslashes, a leading
# single or double quote): enough to compare it with raw names.
_nextfs_dequote()
{
	local s=$1
	case $s in
	\'*) s=${s#\'}; s=${s%\'} ;;
	\"*) s=${s#\"}; s=${s%\"} ;;
	*) s=$(printf '%s' "$s" | sed 's/\\\(.\)/\1/g') ;;
	esac
	printf '%s' "$s"
}

# COMPREPLY = the snapshot names of TARGET that start with CUR, quoted so
# that the shell reads them back as they are.
_nextfs_complete_names()
{
	local target=$1 cur n
	cur=$(_nextfs_dequote "$2")
	_nextfs_snapshot_names "$target"
	for n in "${_nextfs_names[@]}"; do
		[[ $n == "$cur"* ]] && COMPREPLY+=("$(printf '%q' "$n")")
	done
}

# COMPREPLY = files (or only directories with -d) matching CUR.
_nextfs_complete_files()
{
	if declare -F _filedir >/dev/null; then
		_filedir $1
		return
	fi
	local cur=$2 f
	compopt -o filenames 2>/dev/null
	if [[ $1 == -d ]]; then
		while IFS= read -r f; do COMPREPLY+=("$f"); done \
			< <(compgen -d -- "$cur")
	else
		while IFS= read -r f; do COMPREPLY+=("$f"); done \
			< <(compgen -f -- "$cur")
	fi
}

# The command table of nextfs, as "nextfs __commands" prints it
# (src/cli/cmdline.c): one line per command, "PATH;OPTIONS;KINDS", e.g.
# "snapshot prune;--keep=keep --dry-run !-n --json;target".  _nextfs reads
# it once into _nextfs_table.
_nextfs_table_of()
{
	"${_nextfs_cmd:-nextfs}" __commands 2>/dev/null
}

# The commands (the first word of each PATH), once each, in table order.
_nextfs_commands()
{
	local p o k last=
	while IFS=';' read -r p o k; do
		p=${p%% *}
		[[ $p && $p != "$last" ]] && echo "$p"
		last=$p
	done <<<"$_nextfs_table"
}

# The subcommands of the group $1 ("snapshot"): none for a command.
_nextfs_subcommands()
{
	local p o k
	while IFS=';' read -r p o k; do
		[[ $p == "$1 "* ]] && echo "${p#"$1 "}"
	done <<<"$_nextfs_table"
}

# The entry of PATH: its options in _nextfs_opts, the kinds of its
# arguments in _nextfs_kinds (see the table above); fails for a command
# the table does not have.
_nextfs_entry()
{
	local p o k
	_nextfs_opts= _nextfs_kinds=
	while IFS=';' read -r p o k; do
		if [[ $p == "$1" ]]; then
			_nextfs_opts=$o _nextfs_kinds=$k
			return 0
		fi
	done <<<"$_nextfs_table"
	return 1
}

# The options to offer: those not hidden ("!"), every spelling, --help.
_nextfs_options()
{
	local e
	for e in $_nextfs_opts; do
		[[ $e == !* ]] && continue
		e=${e%%=*}
		printf '%s\n' ${e//|/ }
	done
	echo --help
}

# Does option W take a value?  Its kind (what to offer for the value:
# "keep" retention rules, "snap" snapshot names, "file", "" nothing) then
# goes to _nextfs_vkind.
_nextfs_value_kind()
{
	local e
	for e in $_nextfs_opts; do
		e=${e#!}
		[[ $e == *=* && "|${e%%=*}|" == *"|$1|"* ]] || continue
		_nextfs_vkind=${e#*=}
		return 0
	done
	return 1
}

# COMPREPLY = what goes where an option takes a value of KIND $1.
_nextfs_complete_value()
{
	local where
	case $1 in
	keep)	# retention rules (nextfs(1), snapshot prune)
		COMPREPLY=($(compgen -W 'last= hourly= daily= weekly= monthly=
			yearly=' -- "$cur"))
		compopt -o nospace 2>/dev/null ;;
	snap)	# the snapshots of the first argument's volume: the image
		# or mount point it names, or the mount a path is on
		where=${args[0]:-.}
		[[ $_nextfs_kinds == path* && ! -d $where ]] &&
			where=$(dirname -- "$where")
		_nextfs_complete_names "$where" "$cur" ;;
	file)	_nextfs_complete_files "" "$cur" ;;
	esac
}

# COMPREPLY = what goes where an argument of KIND $1 goes: target, image
# (an image, a device or a mount point), dir, path (a file on a mount),
# snap (an existing snapshot name), new (a name to make up: nothing to
# offer), out (a file or "-"), cmd (a command), rest (files, for every
# further argument), command (a command of nextfs, then one of its
# subcommands).
_nextfs_complete_arg()
{
	case $1 in
	target|image|path|out|rest) _nextfs_complete_files "" "$cur" ;;
	cmd)			COMPREPLY=($(compgen -c -- "$cur")) ;;
	dir)			_nextfs_complete_files -d "$cur" ;;
	snap)			_nextfs_complete_names "${args[0]}" "$cur" ;;
	command)
		if ((${#args[@]} == 0)); then
			COMPREPLY=($(compgen -W "$(_nextfs_commands)" -- "$cur"))
		else
			COMPREPLY=($(compgen -W \
				"$(_nextfs_subcommands "${args[0]}")" -- "$cur"))
		fi ;;
	esac
}

_nextfs()
{
	local cur=${COMP_WORDS[COMP_CWORD]} cmd path subs w i start=2 ddash=0
	local before after kind
	local -a args=() kinds=()
	local _nextfs_cmd=${COMP_WORDS[0]} _nextfs_table _nextfs_opts
	local _nextfs_kinds _nextfs_vkind
	COMPREPLY=()

	[[ $_nextfs_cmd == "~"* ]] && _nextfs_cmd=$HOME${_nextfs_cmd:1}
	_nextfs_table=$(_nextfs_table_of)
	if ((COMP_CWORD == 1)); then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W '--help --version' -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$(_nextfs_commands)" -- "$cur"))
		fi
		return
	fi
	cmd=${COMP_WORDS[1]} path=${COMP_WORDS[1]}
	subs=$(_nextfs_subcommands "$cmd")
	if [[ $subs ]]; then
		if ((COMP_CWORD == 2)); then
			[[ $cur == -* ]] && subs=--help
			COMPREPLY=($(compgen -W "$subs" -- "$cur"))
			return
		fi
		path="$cmd ${COMP_WORDS[2]}" start=3
	fi
	# Unknown commands complete files.
	_nextfs_entry "$path" || _nextfs_kinds='target target target'
	for ((i = start; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ $w == = ]]; then
			# "a=b" is three words in COMP_WORDS: one argument
			before=${COMP_WORDS[i - 1]} after=
			if ((i + 1 < COMP_CWORD)); then
				((i++))
				after=${COMP_WORDS[i]}
			fi
			if [[ $before != -* ]] && ((${#args[@]})); then
				args[-1]+="=$after"
			fi
		elif ((!ddash)) && [[ $w == -- ]]; then
			ddash=1
		elif ((!ddash)) && _nextfs_value_kind "$w"; then
			((i++))		# its value is no argument
		elif ((ddash)) || [[ $w != -?* ]]; then
			args+=("$w")
		fi
	done
	if ((!ddash && COMP_CWORD > start)) &&
		_nextfs_value_kind "${COMP_WORDS[COMP_CWORD - 1]}"; then
		_nextfs_complete_value "$_nextfs_vkind"
		return
	fi
	if ((!ddash)) && [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(_nextfs_options)" -- "$cur"))
		return
	fi
	kinds=($_nextfs_kinds)
	kind=${kinds[${#args[@]}]}
	((${#kinds[@]})) && [[ -z $kind && ${kinds[-1]} == rest ]] &&
		kind=rest
	_nextfs_complete_arg "$kind"
}

# nextfs-fuse's -o options: its own, the FUSE ones and the generic mount
# options libfuse passes to the kernel.  The help names more (as "-o NAME")
# if a later version adds any.
_nextfs_fuse_mount_options()
{
	echo ro rw read_ahead_kb= fakeroot snapshot_group= allow_other \
		allow_root auto_unmount \
		default_permissions fsname= subtype= max_read= \
		nosuid suid nodev dev noexec exec noatime atime \
		sync async dirsync
	"${_nextfs_cmd:-nextfs-fuse}" --help 2>/dev/null |
		grep -oE -- '-o [a-z_]+=?' | cut -c4-
}

# Complete the last entry of the comma-separated list in the -o argument
# WORD (as typed, "-o" prefix included when joined: "-oro,al").
_nextfs_fuse_complete_opts()
{
	local word=$1 head last o
	head=${word%,*}
	if [[ $head == "$word" ]]; then
		head=
		last=$word
	else
		head=$head,
		last=${word##*,}
	fi
	if [[ $last == -o* ]]; then
		head=-o
		last=${last#-o}
	fi
	[[ $last == *=* ]] && return	# a value: nothing to offer
	for o in $(_nextfs_fuse_mount_options | tr ' ' '\n' | sort -u); do
		[[ $o == "$last"* ]] && COMPREPLY+=("$head$o")
	done
	# Values follow "=" directly; bash replaces only the text after the
	# last "=" of COMP_WORDBREAKS, so give it that part.
	local replaced=${COMP_WORDS[COMP_CWORD]}
	if ((${#replaced} < ${#word})) && [[ $replaced != "=" ]]; then
		COMPREPLY=("${COMPREPLY[@]/#"${word:0:${#word}-${#replaced}}"}")
	fi
	if ((${#COMPREPLY[@]} == 1)) && [[ ${COMPREPLY[0]} == *= ]]; then
		compopt -o nospace 2>/dev/null
	fi
	return 0
}

_nextfs_fuse()
{
	local cur=${COMP_WORDS[COMP_CWORD]} line word prev i w npos=0
	local _nextfs_cmd=${COMP_WORDS[0]}
	COMPREPLY=()

	# The word as typed: COMP_WORDS splits at "=", which -o lists hold.
	line=${COMP_LINE:0:COMP_POINT}
	word=${line##*[[:space:]]}
	prev=${line%"$word"}
	prev=${prev%"${prev##*[![:space:]]}"}
	prev=${prev##*[[:space:]]}
	if [[ $prev == -o ]] || [[ $word == -o?* ]]; then
		_nextfs_fuse_complete_opts "$word"
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W '-f -d -s -o -h --help -V --version' \
			-- "$cur"))
		return
	fi
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ $w == -o ]]; then
			((i++))
		elif [[ $w == = ]]; then
			((i++))		# "a=b" is three words in COMP_WORDS
		elif [[ $w != -* ]]; then
			((npos++))
		fi
	done
	case $npos in
	0) _nextfs_complete_files "" "$cur" ;;		# IMAGE_OR_DEVICE
	1) _nextfs_complete_files -d "$cur" ;;		# MOUNTPOINT
	esac
}

complete -F _nextfs nextfs
complete -F _nextfs_fuse nextfs-fuse
