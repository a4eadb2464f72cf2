"""``nplm kenlm-shim install|remove|status``: ``import kenlm`` gives nplm in every
process of an environment (nplm.kenlm_shim)."""
from nplm import kenlm_shim
from nplm.cli.common import command


@command("kenlm-shim", "Make `import kenlm` give nplm in every process of this environment "
                       "(and pass 'is kenlm installed?' checks), or undo it")
class KenlmShim:
    @staticmethod
    def add_arguments(p):
        p.add_argument("action", choices=["install", "remove", "status"])
        p.add_argument("--target", help="the site-packages folder (default: this Python's)")
        p.add_argument("--force", action="store_true",
                       help="install over a real kenlm, keeping it aside until `remove` puts it back")

    @staticmethod
    def run(args):
        if args.action == "install":
            print(kenlm_shim.install(args.target, force=args.force))
        elif args.action == "remove":
            print(kenlm_shim.remove(args.target))
        else:
            print(kenlm_shim.status(args.target))
        return 0
