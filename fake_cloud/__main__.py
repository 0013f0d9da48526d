from fake_cloud.cli import main

main()
